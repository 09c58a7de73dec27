"""Stage `translate_queries`: the test queries of translate-search (Table 5), translated once into the pivot.

For each language of `retrieval.translate_search.languages`, every human test caption of the target corpus in that
language goes through the text-only MT system `mt-<lang>-<pivot>` (beam `mmt.beam`) into
`<out>/<lang>-<pivot>.parquet` (columns `text`, `translation`). The `train_retrieval` runs read these instead of
loading the MT systems themselves, so they depend on the translations alone: training a new language's systems
leaves this stage's files, and so every retrieval run that does not use them, as they were.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from prefect import flow, tags

from common.files import atomic_dir, write_json
from common.runtime import Runtime
from corpora.prepared import read_prepared
from corpora.tables import write_parquet
from mmtr.params import Params
from mmtr.stage import named, run_stage, run_tags, stage_parser
from tasks.mmt import translate_texts


def query_texts(captions: pa.Table, lang: str) -> list[str]:
    """The distinct human test captions in ``lang``, sorted (the queries of translate-search)."""
    chosen = captions.filter(
        pc.and_(
            pc.and_(pc.equal(captions["split"], "test"), pc.equal(captions["origin"], "human")),
            pc.equal(captions["lang"], lang),
        )
    )
    return sorted(set(chosen.column("text").to_pylist()))


@flow(name="translate_queries", log_prints=True, persist_result=False)
def translate_queries(
    languages: list[str], pivot: str, prepared: str, models: str, out: str, beam: int, runtime: Runtime
) -> dict[str, int]:
    captions = read_prepared(prepared).captions
    counts: dict[str, int] = {}
    with atomic_dir(out) as staged:
        for lang in languages:
            texts = query_texts(captions, lang)
            translations = translate_texts(str(Path(models) / f"mt-{lang}-{pivot}"), texts, beam=beam, runtime=runtime)
            table = pa.table({"text": pa.array(texts, pa.string()), "translation": pa.array(translations, pa.string())})
            write_parquet(table, staged / f"{lang}-{pivot}.parquet")
            counts[lang] = len(texts)
            print(f"{lang}->{pivot}: {len(texts)} test queries translated")
        # also written with no language, so the folder (a DVC output) always exists
        write_json(staged / "queries.json", {"pivot": pivot, "beam": beam, "queries": counts})
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("translate_queries", __doc__ or "")
    parser.add_argument("--prepared", required=True, help="the target corpus's prepared folder (its test captions)")
    parser.add_argument("--models", required=True, help="the MT systems' folder (<paths.models>/mmt)")
    parser.add_argument("--out", required=True, help="output folder (paths.queries)")

    def body(args: argparse.Namespace, params: Params) -> None:
        runtime = Runtime.resolve(params.device, params.precision)
        languages = list(params.retrieval.translate_search.languages)
        with tags(*run_tags("translate_queries")):
            named(translate_queries, args.params)(
                languages, params.languages.pivot, args.prepared, args.models, args.out, params.mmt.beam, runtime
            )

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
