"""Real Multi30K at the published level: the text-only route's recipe (profile `multi30k_text`) on task 1, one
direction per run, through the stages' own code.

The params are the repository's `params.yaml` with the profiles `real_multi30k_text` (the corpora: Multi30K task 1
without images, the WMT sample as the text-only corpus) and `multi30k_text` (the recipe) applied. The run then does
what the stages do: `prepare` and `prepare_parallel` (their flows), and the one direction of `train_mmt` through
`tasks.mmt.train_direction` (subwords, text-only pre-training on the WMT sample, fine-tuning on the 29,000 caption
translations with early stopping on validation BLEU, test2016 translated with beam search and scored). Directions run
as separate processes, so that each can have a core of its own (`train_mmt` itself runs both at once, one thread each,
with `distributed.parallel_directions`).

It records, into `bench/results/multi30k_text.json` under the direction's key: the settings, the learning curve
(validation BLEU, greedy, after each epoch, with the wall time at that point), the test2016 scores (BLEU on lowercased,
Moses-tokenised text as the literature reports; cased sacreBLEU and chrF on the detokenised output; METEOR 1.5), the
first test translations, the wall time of each part, and the load average at the start and end (on a shared machine a
busy run is slower than the code).

    python bench/multi30k_text.py --data <folder with multi30k/ and wmt-sample/> --direction en-de
    python bench/multi30k_text.py --data <same> --direction en-de --work <its folder> --more-time   # past its budget
    python bench/multi30k_text.py --markdown bench/results/multi30k_text.json --into docs/real-data.md
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: the repository's packages, as with PYTHONPATH=.

import yaml  # noqa: E402

from common.files import read_json, write_json, write_text  # noqa: E402
from mmtr.doc_sections import add_section_arguments, publish_section  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "multi30k_text.json"
SECTION = "multi30k-text"  # the docs section this bench writes (mmtr.doc_sections)
PROFILES = ("real_multi30k_text", "multi30k_text")
WMT_SPLITS = {"train": "train", "val": "val", "test": "test"}
PUBLISHED = "Multi30K-only text NMT 33.7-35.5 BLEU en->de on test2016; the paper's MMT 37.5 BLEU / 55.1 METEOR"


def layout_wmt(sample: Path, out: Path) -> Path:
    """The WMT sample's files linked in the parallel corpus layout, `en-de/<split>.<lang>` (nothing copied)."""
    pair = out / "en-de"
    pair.mkdir(parents=True, exist_ok=True)
    for split in WMT_SPLITS:
        for side, lang in (("src", "en"), ("tgt", "de")):
            link = pair / f"{split}.{lang}"
            if not link.exists():
                link.symlink_to((sample / f"{side}-{split}.txt").resolve())
    return out


def write_run_params(work: Path, multi30k: Path, parallel: Path, max_steps: int | None) -> Path:
    """params.yaml with the two profiles applied and the corpora pointed at the data: the run's params file."""
    from mmtr.profiles import apply_profile

    params = work / "params.yaml"
    write_text(params, (REPO / "params.yaml").read_text(encoding="utf-8"))
    for name in PROFILES:
        apply_profile(name, params, params)
    tree = yaml.safe_load(params.read_text(encoding="utf-8"))
    tree["corpora"]["multi30k"].update(
        source=str(multi30k), images=str(work / "no-images"), boxes=str(work / "no-images")
    )
    tree["paths"]["parallel"] = str(parallel)
    tree["prepare"]["text"]["control_characters"] = "remove"  # the WMT sample holds C1 controls
    if max_steps is not None:  # a quick check of the whole path, not a measurement
        for phase in ("pretrain", "finetune"):
            tree["mmt"][phase]["max_steps"] = max_steps
    write_text(params, yaml.safe_dump(tree, sort_keys=False, allow_unicode=True))
    return params


RESUMED = ": resuming after epoch"  # what a fit logs when it continues from its resume state (mmt.train)


class CurveTimes(logging.Handler):
    """The wall time of each validation line the training logs (`... val BLEU ...`), and of the line a resumed fit
    logs, from the handler's start."""

    def __init__(self, log: Path) -> None:
        super().__init__()
        self.started = time.perf_counter()
        self.lines: list[tuple[float, str]] = []
        self.log = log  # each line as it comes: what a stopped run reached

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "val BLEU" in message or RESUMED in message:
            self.lines.append((time.perf_counter() - self.started, message))
            with self.log.open("a", encoding="utf-8") as out:
                out.write(f"{self.lines[-1][0]:.1f}\t{message}\n")


@dataclasses.dataclass(frozen=True)
class TrainedDirection:
    """What one pass of the stage's code over a direction left: where, when, and the lines the training logged."""

    params_file: Path
    folder: Path
    metrics: dict[str, Any]
    lines: list[tuple[float, str]]
    load_start: tuple[float, float, float]
    seconds: dict[str, float]


def run_direction(
    data: Path, src: str, tgt: str, work: Path, threads: int, max_steps: int | None = None
) -> dict[str, Any]:
    from mmt.curves import learning_curve

    run = train_and_test(data, src, tgt, work, threads, max_steps, work / "validations.log")
    curve = [
        {"epoch": row["epoch"], "loss": row["loss"], "score": row["val_bleu"], "seconds": round(seconds, 1)}
        for row, (seconds, _) in zip(
            _finetune_rows(learning_curve(run.folder)), _finetune_lines(run.lines), strict=False
        )
    ]
    translations = (run.folder / f"test-hypotheses.{tgt}.txt").read_text(encoding="utf-8").splitlines()
    return {
        **_run_facts(src, tgt, threads, run.load_start, run.params_file, run.metrics),
        "curve": curve,
        "validations": [line for _, line in run.lines],
        "seconds": run.seconds,
        "sample_translations": translations[:5],
        "published": PUBLISHED,
    }


def continue_stopped(
    data: Path, src: str, tgt: str, work: Path, threads: int, stopped: dict[str, Any]
) -> dict[str, Any]:
    """The same recipe with more time: the run in ``work`` that was stopped at its budget (``stopped``, its record),
    resumed from the state its fine-tuning saved after the last finished epoch and trained until its own early stopping
    or epoch limit ends it; test2016 scored with the best weights. The validations go to
    ``validations-more-time.log``; a continuation stopped in turn is continued by running this again."""
    log = work / "validations-more-time.log"
    run = train_and_test(data, src, tgt, work, threads, None, log)
    logged = log.read_text(encoding="utf-8")
    curve, offset = continued_curve(stopped["curve"], logged.splitlines())
    if offset is None:
        raise SystemExit(
            f"{work}: fine-tuning never resumed from a saved state; nothing here continues the stopped run"
        )
    whole = stopped["curve"] + curve
    best = max(whole, key=lambda row: row["score"])
    return {
        "resumed_after_epoch": stopped["curve"][-1]["epoch"],
        "curve": curve,
        "ended_after_epoch": whole[-1]["epoch"],
        "best_epoch": best["epoch"],
        "test": _test_scores(run.metrics),
        "seconds": {"train_and_test": round(run.seconds["train_and_test"] + offset, 1)},
        "load_average": {"start": list(run.load_start), "end": list(os.getloadavg())},
        # the lines as logged, less the folder the run happened to work in
        "validations": logged.replace(f"{work}/", "").splitlines(),
    }


RESUMED_LINE = re.compile(r"^([\d.]+)\t\S+ finetune: resuming after epoch (\d+) of")


def continued_curve(stopped: list[dict[str, Any]], lines: list[str]) -> tuple[list[dict[str, Any]], float | None]:
    """The epochs a stopped run trained after ``stopped`` (its curve), from the log lines of the processes that
    continued it (``<seconds since the process's start>\t<message>``), each epoch's time on the stopped run's clock:
    a process's clock is set where its fine-tuning resumed, to the time of the epoch it resumed after (preparing the
    data again and the finished pre-training are not counted). Also the offset of the last process's clock (None
    when no process resumed)."""
    curve = list(stopped)
    offset: float | None = None
    for line in lines:
        resumed = RESUMED_LINE.match(line)
        if resumed:
            epoch = int(resumed[2])
            curve = [row for row in curve if row["epoch"] <= epoch]  # a later resume redoes what followed
            offset = curve[-1]["seconds"] - float(resumed[1])
            continue
        found = VALIDATION.match(line)
        if found and offset is not None:
            curve.append(
                {
                    "epoch": int(found[2]),
                    "loss": float(found[4]),
                    "score": float(found[5]),
                    "seconds": round(float(found[1]) + offset, 1),
                }
            )
    return curve[len(stopped) :], offset


def train_and_test(
    data: Path, src: str, tgt: str, work: Path, threads: int, max_steps: int | None, log: Path
) -> TrainedDirection:
    """The stages' code over one direction in ``work``: prepare, prepare_parallel, then `train_mmt`'s direction task
    (which resumes from the states a stopped run left in ``work``)."""
    from common.runtime import Runtime, use_cpu_threads
    from corpora.prepared import read_parallel_tables, read_prepared
    from flows import prepare, prepare_parallel
    from mmt.pairs import direction_data
    from mmt.systems import TEXT_ONLY_REGION_DIM
    from mmtr.params import load_params
    from tasks.mmt import DirectionJob, PairPaths, train_direction

    use_cpu_threads(threads)
    load_start = os.getloadavg()
    started = time.perf_counter()
    parallel = layout_wmt(data / "wmt-sample" / "opennmt-toy-ende", work / "wmt")
    params_file = write_run_params(work, data / "multi30k", parallel, max_steps)
    params = load_params(params_file)
    prepared, prepared_parallel = work / "prepared", work / "parallel"
    prepare.main(["--params", str(params_file), "--corpus", "multi30k", "--out", str(prepared)])
    pair_table = str(prepared_parallel / "en-de.parquet")
    prepare_parallel.main(
        ["--params", str(params_file), "--target", "de", "--parallel", str(parallel), "--out", pair_table]
    )
    prepared_at = time.perf_counter()
    corpus = dataclasses.replace(read_prepared(str(prepared)), parallel=read_parallel_tables(str(prepared_parallel)))
    pivot, target = params.languages.pivot, params.mmt.targets[0]
    directions = direction_data(corpus, pivot=pivot, target=target, src=src, tgt=tgt)
    paths = PairPaths(None, str(work / "models"), str(work / "mt-models"), str(work / "metrics"), str(work / "states"))
    runtime = Runtime.resolve(params.device, params.precision)
    job = DirectionJob(src, tgt, directions, params.mmt, paths, TEXT_ONLY_REGION_DIM, params.seed, runtime)
    times = CurveTimes(log)
    logging.getLogger("mmt").addHandler(times)
    logging.getLogger("mmt").setLevel(logging.INFO)
    train_direction.fn(job)
    finished = time.perf_counter()
    return TrainedDirection(
        params_file=params_file,
        folder=work / "models" / f"mt-{src}-{tgt}",
        metrics=read_json(work / "metrics" / f"mt-{src}-{tgt}.json"),
        lines=times.lines,
        load_start=load_start,
        seconds={
            "prepare": round(prepared_at - started, 1),
            "train_and_test": round(finished - prepared_at, 1),
            "total": round(finished - started, 1),
        },
    )


VALIDATION = re.compile(r"^([\d.]+)\t\S+ finetune · epoch (\d+)/\d+ · step (\d+) · loss ([\d.]+) · val BLEU ([\d.]+)")


def evaluate_stopped(src: str, tgt: str, work: Path, threads: int) -> dict[str, Any]:
    """A run stopped by hand during fine-tuning (its wall-time budget spent): test2016 scored with the best
    weights it saved (the checkpoint early stopping keeps), the curve read from its validations log."""
    from common.metrics_files import write_metrics
    from common.runtime import Runtime, use_cpu_threads
    from corpora.prepared import read_parallel_tables, read_prepared
    from mmt.evaluation import evaluate_system
    from mmt.pairs import direction_data
    from mmt.systems import SYSTEM_FILE
    from mmtr.params import load_params

    use_cpu_threads(threads)
    load_start = os.getloadavg()
    params_file = work / "params.yaml"
    params = load_params(params_file)
    corpus = dataclasses.replace(
        read_prepared(str(work / "prepared")), parallel=read_parallel_tables(str(work / "parallel"))
    )
    data = direction_data(corpus, pivot=params.languages.pivot, target=params.mmt.targets[0], src=src, tgt=tgt)
    folder = work / "models" / f"mt-{src}-{tgt}"
    if not (folder / SYSTEM_FILE).exists():  # the stage records the backend once the fit ends; this one was stopped
        write_json(folder / SYSTEM_FILE, {"backend": params.mmt.mt_system, "src": src, "tgt": tgt})
    started = time.perf_counter()
    runtime = Runtime.resolve(params.device, params.precision)
    evaluation = evaluate_system(
        str(folder),
        data.captions["test"],
        store=None,
        tgt=tgt,
        beam=params.mmt.beam,
        runtime=runtime,
        meteor=params.mmt.meteor,
    )
    evaluated = time.perf_counter() - started
    write_metrics(work / "metrics" / f"mt-{src}-{tgt}.json", evaluation.metrics)
    write_text(folder / f"test-hypotheses.{tgt}.txt", "".join(f"{line}\n" for line in evaluation.hypotheses))
    lines = (work / "validations.log").read_text(encoding="utf-8").splitlines()
    curve = [
        {"epoch": int(found[2]), "loss": float(found[4]), "score": float(found[5]), "seconds": float(found[1])}
        for found in map(VALIDATION.match, lines)
        if found
    ]
    metrics = evaluation.metrics
    best = max(curve, key=lambda row: row["score"])
    return {
        **_run_facts(src, tgt, threads, load_start, params_file, metrics),
        "curve": curve,
        "stopped": {"after_epoch": curve[-1]["epoch"], "best_epoch": best["epoch"]},
        "validations": [line.split("\t", 1)[1] for line in lines],
        "seconds": {"train_and_test": round(curve[-1]["seconds"] + evaluated, 1), "test": round(evaluated, 1)},
        "sample_translations": evaluation.hypotheses[:5],
        "published": PUBLISHED,
    }


def _run_facts(
    src: str, tgt: str, threads: int, load_start: tuple[float, float, float], params_file: Path, metrics: dict[str, Any]
) -> dict[str, Any]:
    """What every record of a direction holds: where and how it ran, the recipe, the test scores."""
    return {
        "direction": f"{src}-{tgt}",
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} CPU cores ({platform.machine()}, {platform.system()})",
        "threads": threads,
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "settings": {"mmt": _recipe(params_file)},
        "test": _test_scores(metrics),
    }


def _scores_row(label: str, run: dict[str, Any], part: dict[str, Any], epochs: str) -> str:
    """A row of the docs' scores table: the test scores, time and load of ``part`` (the run, or its continuation)."""
    test, load = part["test"], part["load_average"]
    meteor = f"{test['meteor']:.1f}" if isinstance(test.get("meteor"), float) else "-"
    return (
        f"| {label} | {test['bleu']:.1f} | {test['sacrebleu']:.1f} | {test['chrf']:.1f} | {meteor} | {epochs}"
        f" | {_minutes(part['seconds']['train_and_test'])}"
        f" | {run['machine']}, {run['threads']} thread(s), {load['start'][0]:.1f}, {load['end'][0]:.1f} |"
    )


def _test_scores(metrics: dict[str, Any]) -> dict[str, Any]:
    """The test scores a record keeps of a metrics file."""
    return {key: metrics[key] for key in ("bleu", "sacrebleu", "chrf", "meteor", "test_sentences") if key in metrics}


def _finetune_rows(curve: list[dict[str, object]]) -> list[dict[str, object]]:
    return [row for row in curve if row.get("phase") == "finetune"]


def _finetune_lines(lines: list[tuple[float, str]]) -> list[tuple[float, str]]:
    return [item for item in lines if "finetune" in item[1] and "val BLEU" in item[1]]


def _recipe(params_file: Path) -> dict[str, Any]:
    tree = yaml.safe_load(params_file.read_text(encoding="utf-8"))["mmt"]
    return {key: tree[key] for key in ("systems", "mt_system", "text", "model", "pretrain", "finetune", "beam")}


def markdown(record: dict[str, Any]) -> str:
    """The docs section: each direction's test scores, its settings and its learning curve."""
    runs = record["directions"]
    lines = [
        "Written by `python bench/multi30k_text.py --markdown bench/results/multi30k_text.json"
        " --into docs/real-data.md` from the runs' record.",
        "",
        "| direction | test2016 BLEU (lowercased, tokenised) | sacreBLEU (cased) | chrF | METEOR | epochs"
        " | training + test | machine, threads, load average (start, end) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, run in sorted(runs.items()):
        direction = name.replace("-", "→")
        lines.append(_scores_row(direction, run, run, str(len(run["curve"]))))
        more = run.get("more_time")
        if more is not None:
            more_epochs = f"{more['ended_after_epoch']} (best {more['best_epoch']})"
            lines.append(_scores_row(f"{direction}, the same run with more time", run, more, more_epochs))
    lines += [
        "",
        f"Published: {record.get('published', PUBLISHED)}.",
        "",
        "Validation BLEU (greedy, cased) per epoch; the epochs after a run's stop, where it was resumed with more time,"
        " are marked +:",
        "",
    ]
    names = sorted(runs)
    curves = {name: _whole_curve(runs[name]) for name in names}
    epochs = max(len(curve) for curve in curves.values())
    lines.append("| epoch | " + " | ".join(f"{name.replace('-', '→')} (time)" for name in names) + " |")
    lines.append("|---" * (len(names) + 1) + "|")
    for index in range(epochs):
        cells = []
        for name in names:
            curve, stopped_at = curves[name], len(runs[name]["curve"])
            mark = "+" if index >= stopped_at else ""
            cells.append(
                f"{mark}{curve[index]['score']:.1f} ({_minutes(curve[index]['seconds'])})" if index < len(curve) else ""
            )
        lines.append(f"| {index + 1} | " + " | ".join(cells) + " |")
    first = runs[names[0]]
    lines += ["", "The recipe (`mmtr/profiles/multi30k_text.yaml`, as the runs read it):", "", "```yaml"]
    lines += yaml.safe_dump({"mmt": first["settings"]["mmt"]}, sort_keys=False).splitlines()
    lines += ["```", ""]
    for name in names:
        if runs[name]["sample_translations"]:
            lines += [f"First test2016 translations, {name.replace('-', '→')}:", ""]
            lines += [f"- {text}" for text in runs[name]["sample_translations"][:3]]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _whole_curve(run: dict[str, Any]) -> list[dict[str, Any]]:
    """A direction's learning curve, with the epochs it trained when resumed with more time."""
    more = run.get("more_time")
    return run["curve"] + (more["curve"] if more is not None else [])


def _minutes(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="folder holding multi30k/ (task1) and wmt-sample/opennmt-toy-ende/")
    parser.add_argument("--direction", choices=("en-de", "de-en"), default="en-de")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (the stage gives each direction one)")
    parser.add_argument("--work", type=Path, help="working folder (default: a new temporary folder)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--max-steps", type=int, help="stop each phase after this many steps (a check of the path)")
    parser.add_argument(
        "--stopped",
        action="store_true",
        help="score the best weights of a run in --work that was stopped during fine-tuning (its budget spent)",
    )
    parser.add_argument(
        "--more-time",
        action="store_true",
        help="resume the run in --work that was stopped at its budget and train it until its early stopping ends it;"
        " recorded beside the stopped run's figures",
    )
    add_section_arguments(parser)
    args = parser.parse_args(argv)
    if publish_section(args, SECTION, markdown):
        return
    if args.data is None and not args.stopped:
        parser.error("--data is required to run")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    src, tgt = args.direction.split("-")
    record: dict[str, Any] = read_json(args.out) if args.out.exists() else {"published": PUBLISHED, "directions": {}}
    if (args.stopped or args.more_time) and args.work is None:
        parser.error("--stopped and --more-time take the run in --work: give it")
    if args.more_time:
        stopped = record["directions"].get(args.direction)
        if stopped is None or "stopped" not in stopped:
            parser.error(f"{args.out} holds no stopped {args.direction} run to continue")
        stopped["more_time"] = continue_stopped(
            args.data.resolve(), src, tgt, args.work.resolve(), args.threads, stopped
        )
        run = stopped["more_time"]
    elif args.stopped:
        run = evaluate_stopped(src, tgt, args.work.resolve(), args.threads)
        record["directions"][args.direction] = run
    else:
        work = args.work or Path(tempfile.mkdtemp(prefix=f"multi30k-text-{args.direction}-"))
        run = run_direction(args.data.resolve(), src, tgt, work.resolve(), args.threads, args.max_steps)
        record["directions"][args.direction] = run
    write_text(args.out, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(run["test"]))


if __name__ == "__main__":
    main()
