# One command each: `make demo` (install + run the pipeline), `make test` (install + lint + run the tests);
# `make test-fast` runs the fast tests alone.
PYTHON ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
# pytest-xdist: one worker per core, at most 4 (each starts its own Prefect test server and tiny-dataset fixtures);
# tests/conftest.py gives each worker's torch its share of the cores. worksteal: an idle worker takes queued tests
# from a busy one, so the end-to-end tests (up to 2 minutes each) do not leave one worker waiting on the other.
# --durations=25: every run ends with its 25 slowest tests, so a CI log shows where the suite's time goes.
PYTEST := python -m pytest -n auto --maxprocesses=4 --dist worksteal --durations=25

.PHONY: install demo grid ui plots test test-fast lint docs clean-venv

install: $(STAMP)

# torch first, pinned: an unpinned torch resolves to a multi-GB CUDA build (see README, "Install").
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is needed (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt torch
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev,all]"
	touch $(STAMP)

# One local Prefect server for the whole DAG (started unless PREFECT_API_URL answers; database kept in .prefect/).
# The pipeline flow runs `dvc repro` and records each stage's wall time, which `mmtr results` publishes. One named
# pipeline run per call in the UI; Ctrl-C or kill stops every process it started (docs/prefect-ui.md, "Stopping a run").
demo: $(STAMP)
	PATH="$(BIN):$$PATH" python -m mmtr.local_server run -- python -m flows.pipeline --record data/work/pipeline-stages.json

# The retrieval runs as queued DVC experiments, JOBS at a time (default 2), then the report (docs/scaling.md,
# "The retrieval grid in parallel").
JOBS ?= 2
grid: $(STAMP)
	PATH="$(BIN):$$PATH" python -m mmtr.cli grid --jobs $(JOBS)

# The Prefect UI on the demo's database (http://127.0.0.1:4200 unless that port is taken); Ctrl-C or kill stops
# the server.
ui: $(STAMP)
	PATH="$(BIN):$$PATH" python -m mmtr.local_server ui

# The learning curves (dvc.yaml's plots) in dvc_plots/index.html, a page that loads nothing from the network.
plots: $(STAMP)
	PATH="$(BIN):$$PATH" python -m mmtr.cli plots

test: lint docs
	PATH="$(BIN):$$PATH" $(PYTEST)

# The unit, params and architecture tests only: no Prefect flows, no DVC stages, no slow end-to-end runs.
test-fast: $(STAMP)
	PATH="$(BIN):$$PATH" $(PYTEST) -m "not slow and not flow"

lint: $(STAMP)
	$(BIN)/ruff check common corpora features mmt retrieval report mmtr tasks flows tests bench
	$(BIN)/ruff format --check common corpora features mmt retrieval report mmtr tasks flows tests bench
	$(BIN)/mypy

# The docs site, built strictly: a broken link, a missing anchor or a page outside the nav fails (site in .site/).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet --site-dir .site

clean-venv:
	rm -rf $(VENV)
