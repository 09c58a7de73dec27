"""Stage `prepare@<corpus>`: canonical image and caption tables of one corpus of `corpora`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from prefect import flow, tags

from corpora.config import PrepareConfig
from corpora.languages import Languages
from corpora.prepared import count_captions
from mmtr.params import CorpusParams, Params
from mmtr.stage import named, run_stage, run_tags, stage_parser
from tasks import artifact_key
from tasks.data import CorpusSource, publish_counts, read_captioned_images, write_prepared_tables


@flow(name="prepare", log_prints=True, persist_result=False)
def prepare(config: PrepareConfig, corpus: CorpusParams, languages: Languages, out: str) -> list[dict[str, object]]:
    image_root = corpus.images if config.read_image_sizes else None
    source = CorpusSource(corpus.format, corpus.source, image_root, corpus.dataset, config.images_outside_root)
    read = read_captioned_images(source, config.adapter_config(corpus.format), languages, config.text)
    write_prepared_tables(read, out)
    counts = count_captions(read)
    description = f"{corpus.dataset}: prepared captions per split and language"
    publish_counts(counts, key=artifact_key(f"prepare-{corpus.dataset}-counts"), description=description)
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("prepare", __doc__ or "")
    parser.add_argument("--corpus", required=True, help="a name of `corpora` in params.yaml")
    parser.add_argument("--out", required=True, help="output folder (<paths.prepared>/<corpus>)")

    def body(args: argparse.Namespace, params: Params) -> None:
        corpus = params.corpus(args.corpus)
        with tags(*run_tags("prepare"), f"corpus:{args.corpus}"):
            named(prepare, args.params)(params.prepare, corpus, params.languages, args.out)

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
