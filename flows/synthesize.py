"""Stage `synthesize@<target>`: `synthesis.hops` translation passes of the train split's human pivot captions,
alternating forward (pivot + image -> target) and backward (target + image -> pivot), each pass translating the
previous one's outputs; with the MMT and with the text-only MT system. With `synthesis.to_pivot`, each system also
translates the target's own human train captions into the pivot (MULE's Table 4(b)). Its metrics file gives, per
system and hop from 2 on, the share of captions a round trip rewrote (section 4.3: new wording, not the source
verbatim)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from prefect import flow, get_run_logger, tags
from prefect.artifacts import create_markdown_artifact, update_progress_artifact
from prefect.futures import as_completed
from prefect.utilities.annotations import unmapped

from common.files import write_text
from common.runtime import Runtime
from common.stopping import cancel_on_interrupt
from corpora.prepared import read_prepared
from mmt.config import SynthesisConfig
from mmt.diversity import round_trip_changes
from mmt.synthesis import (
    Origin,
    SynthesisTask,
    collect,
    hop_languages,
    plan_shards,
    select_sources,
    to_pivot_sources,
)
from mmt.systems import system_sha256
from mmtr.params import Params, ParamsError
from mmtr.stage import named, run_stage, run_tags, stage_parser, task_runner
from tasks import artifact_key, progress_artifact
from tasks.mmt import PassSystem, translate_shard, write_synthesized

ORIGINS: tuple[Origin, ...] = ("mmt", "mt")  # the order of the rows in the output


@dataclass(frozen=True)
class SynthesisPaths:
    """What a synthesis stage reads and writes: the target corpus, the trained systems, shards, captions, metrics."""

    prepared: str  # the target corpus's prepared folder (its train split's human pivot captions)
    store: str | None  # the target corpus's FeatureStore the MMT reads; None: the text-only MT system alone
    models: str  # the MT systems' folder (<paths.models>/mmt): <origin>-<src>-<tgt>/ per system
    work: str  # resumable shards of every pass
    out: str  # the synthesized captions' Parquet file
    metrics: str  # the round trips' change shares (<paths.metrics>/synthesis/<target>.json)


@flow(name="synthesize", log_prints=True, persist_result=False)
def synthesize(
    config: SynthesisConfig,
    pivot: str,
    target: str,
    paths: SynthesisPaths,
    runtime: Runtime,
    origins: tuple[Origin, ...] = ORIGINS,
) -> dict[str, int]:
    captions = read_prepared(paths.prepared).captions
    sources = select_sources(captions, lang=pivot, split="train", kinds=config.kinds)
    if config.max_captions is not None:
        sources = sources.slice(0, config.max_captions)
    passes: dict[Origin, list[pa.Table]] = {}  # origin -> the outputs of hops 1..config.hops
    for origin in origins:
        previous = sources
        passes[origin] = []
        for hop in range(1, config.hops + 1):
            src, tgt = hop_languages(hop, pivot, target)
            previous = _pass(config, previous, f"{origin}-{src}-{tgt}", origin, tgt, hop, paths, runtime)
            passes[origin].append(previous)
    to_pivot = _to_pivot_passes(config, captions, pivot, target, paths, runtime, origins) if config.to_pivot else []
    tables = [table for origin in origins for table in passes[origin]] + to_pivot
    counts = write_synthesized(tables, paths.prepared, paths.out)
    changes = {origin: round_trip_changes(sources, passes[origin]) for origin in origins}
    write_text(paths.metrics, json.dumps(changes, indent=2, sort_keys=True) + "\n")
    logger = get_run_logger()
    for line in round_trip_lines(changes):
        logger.info("%s", line)
    _show_samples(sources, passes, pivot, target)
    return counts


def _to_pivot_passes(
    config: SynthesisConfig,
    captions: pa.Table,
    pivot: str,
    target: str,
    paths: SynthesisPaths,
    runtime: Runtime,
    origins: tuple[Origin, ...],
) -> list[pa.Table]:
    """Each system's translations of the target's human train captions into the pivot (hop 1, in the pivot)."""
    source = f"{paths.prepared} captions"
    sources = to_pivot_sources(captions, target=target, split="train", kinds=config.kinds, source=source)
    if config.max_captions is not None:
        sources = sources.slice(0, config.max_captions)
    return [
        _pass(config, sources, f"{origin}-{target}-{pivot}", origin, pivot, 1, paths, runtime) for origin in origins
    ]


def round_trip_lines(changes: Mapping[Origin, Mapping[str, Mapping[str, float | int]]]) -> list[str]:
    """One log line per system and hop of :func:`~mmt.diversity.round_trip_changes`' figures: ``MMT hop 2 · 83.3% of
    12 captions changed · 40 token types, 6 new``."""
    lines = []
    for origin, hops in changes.items():
        for hop, figures in hops.items():
            lines.append(
                f"{origin.upper()} {hop.replace('hop', 'hop ')} · {100 * figures['changed']:.1f}% of "
                f"{figures['captions']} captions changed · {figures['token_types']} token types, "
                f"{figures['new_types']} new"
            )
    return lines


def _pass(
    config: SynthesisConfig,
    sources: pa.Table,
    system: str,
    origin: Origin,
    lang: str,
    hop: int,
    paths: SynthesisPaths,
    runtime: Runtime,
) -> pa.Table:
    """One translation pass, its shards mapped over the task runner, followed by a progress artifact; a stop signal
    meanwhile ends the running shards at their next batch (:func:`common.stopping.cancel_on_interrupt`)."""
    model_dir = str(Path(paths.models) / system)
    task = SynthesisTask(system, origin, lang, hop, system_sha256(model_dir))
    shards = plan_shards(sources, task, work=Path(paths.work), shard_size=config.shard_size)
    translator = PassSystem(model_dir, paths.store, runtime, config.beam, config.batch_size)
    progress = progress_artifact(
        f"{system} (hop {hop}): shards translated", key=artifact_key(f"synthesis-progress-{system}-hop-{hop}")
    )
    with cancel_on_interrupt():
        futures = translate_shard.map(shards, unmapped(task), unmapped(translator))
        for done, future in enumerate(as_completed(futures), start=1):
            future.result()
            update_progress_artifact(artifact_id=progress, progress=100.0 * done / len(shards))
    return collect(shards)


def _show_samples(sources: pa.Table, passes: dict[Origin, list[pa.Table]], pivot: str, target: str) -> None:
    """Up to 8 source captions, each with its translation at every hop (row i of a pass translates row i of the
    pass before, so rows line up)."""
    headers, columns = [f"source ({pivot})"], [sources.column("text").to_pylist()]
    for origin, tables in passes.items():
        for hop, table in enumerate(tables, start=1):
            headers.append(f"{origin.upper()} hop {hop} ({hop_languages(hop, pivot, target)[1]})")
            columns.append(table.column("text").to_pylist())
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in range(0, sources.num_rows, max(sources.num_rows // 8, 1))[:8]:
        lines.append("| " + " | ".join(column[row].replace("|", "/") for column in columns) + " |")
    description = f"Sampled synthesized captions ({target})"
    create_markdown_artifact(
        key=artifact_key(f"synthesized-{target}"), markdown="\n".join(lines), description=description
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("synthesize", __doc__ or "")
    parser.add_argument("--target", required=True)
    for name in ("prepared", "models", "work", "out"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument(
        "--metrics", required=True, help="round-trip change shares (<paths.metrics>/synthesis/<t>.json)"
    )
    parser.add_argument("--store", help="the target corpus's FeatureStore (not read when mmt.systems is [mt])")

    def body(args: argparse.Namespace, params: Params) -> None:
        if "mmt" in params.mmt.systems and args.store is None:
            raise ParamsError("mmt.systems includes mmt, which reads region features: give --store")
        origins = tuple(origin for origin in ORIGINS if origin in params.mmt.systems)
        runtime = Runtime.resolve(params.device, params.precision)
        runnable = named(synthesize, args.params).with_options(task_runner=task_runner(params.runner))  # type: ignore[arg-type]
        with tags(*run_tags("synthesize"), f"pair:{params.languages.pivot}-{args.target}"):
            paths = SynthesisPaths(args.prepared, args.store, args.models, args.work, args.out, args.metrics)
            runnable(params.synthesis, params.languages.pivot, args.target, paths, runtime, origins)

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
