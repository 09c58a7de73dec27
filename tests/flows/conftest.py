"""One Prefect test server for the whole session; flows and DVC stage processes all talk to it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.testing.utilities import prefect_test_harness


@pytest.fixture(scope="session")
def prefect_api_url() -> Iterator[str]:
    """Start the harness once (~15 s); the heartbeat thread is off so each flow costs ~0.2 s, not ~1 s."""
    with prefect_test_harness(server_startup_timeout=90), temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield str(PREFECT_API_URL.value())


@pytest.fixture
def scheduler(prefect_api_url: str) -> Iterator[str]:
    """The address of a Dask ``LocalCluster`` of two single-threaded worker processes (the sharded stages'
    ``runner.kind: dask`` path), its workers reporting to the session's Prefect server."""
    distributed = pytest.importorskip("distributed")
    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = prefect_api_url  # workers inherit it: no temporary Prefect server per worker
    try:
        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster:
            yield cluster.scheduler_address
    finally:
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous


@dataclass(frozen=True)
class TinyDataset:
    root: Path
    params: Path
    raw: Path
    prepared: Path  # the synthetic corpus's tables
    parallel: Path  # the text-only corpus's tables


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory, prefect_api_url: str) -> TinyDataset:
    """The generate, prepare and prepare_parallel flows run once on 6/3/3 images; later stages' tests start
    from here."""
    from flows import generate, prepare, prepare_parallel
    from tests.command_line import flags
    from tests.flows.helpers import tiny_params_tree, write_params

    root = tmp_path_factory.mktemp("tiny")
    raw, prepared, parallel = root / "raw", root / "prepared" / "synthetic", root / "prepared" / "parallel"
    params = write_params(root / "params.yaml", tiny_params_tree(raw=raw))
    generate.main(flags(params=params, out=raw))
    prepare.main(flags(params=params, corpus="synthetic", out=prepared))
    for target in ("de", "fr", "cs"):  # languages.targets: one stage per pair
        prepare_parallel.main(
            flags(params=params, target=target, parallel=raw / "parallel", out=parallel / f"en-{target}.parquet")
        )
    return TinyDataset(root, params, raw, prepared, parallel)


@pytest.fixture(scope="session")
def trained(tiny_dataset: TinyDataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Features, both MMT directions, synthesis, the augmented variants and translate-search's translated queries
    of the tiny dataset (run once)."""
    from flows import augment, synthesize, train_mmt, translate_queries
    from tests.command_line import flags
    from tests.flows.helpers import tiny_params_tree, write_params
    from tests.flows.test_features_flow import run_features

    root = tmp_path_factory.mktemp("mmt")
    store, _ = run_features(tiny_dataset, root, tiny_dataset.raw / "images", tiny_dataset.params)
    common = flags(
        params=tiny_dataset.params, target="de", prepared=tiny_dataset.prepared, store=store, models=root / "models"
    )
    with_meteor = tiny_params_tree(raw=tiny_dataset.raw)
    with_meteor["mmt"]["meteor"] = True  # the one tiny run that scores METEOR end to end
    meteor_params = ["--params", str(write_params(root / "with-meteor.yaml", with_meteor))]
    train_mmt.main(
        [
            *common,
            *meteor_params,
            *flags(parallel=tiny_dataset.parallel, mt_models=root / "mt-models", metrics=root / "metrics" / "mmt"),
        ]
    )
    synthesize.main(
        [
            *common,
            *flags(
                work=root / "work",
                out=root / "synthesized" / "de.parquet",
                metrics=root / "metrics" / "synthesis" / "de.json",
            ),
        ]
    )
    # `augment` builds the variants of retrieval.variants: here every preset of at most two hops
    every_variant = tiny_params_tree()
    every_variant["retrieval"]["variants"] = ["none", "mt_f", "mt_fb", "mt_f_fb", "mmt_f", "mmt_fb", "mmt_f_fb"]
    augment_params = write_params(root / "every-variant.yaml", every_variant)
    augment.main(
        flags(
            params=augment_params,
            prepared=tiny_dataset.prepared,
            synthesized=root / "synthesized",
            out=root / "augmented",
            metrics=root / "metrics" / "augment.json",
        )
    )
    translate_queries.main(
        flags(params=tiny_dataset.params, prepared=tiny_dataset.prepared, models=root / "models", out=root / "queries")
    )
    return root
