"""Stage `export`: each caption variant that `augment` built as a Hugging Face dataset folder.

``<out>/<variant>/`` holds a dataset card (README.md, whose ``configs`` let ``datasets.load_dataset(<folder>)``
read it), the Parquet files ``data/<split>-*.parquet`` and the ``save_to_disk`` copy ``hf/`` (``load_from_disk``);
one row per caption with its provenance, splits train, validation (our val) and test. `export.images` embeds the
image files, `export.regions` adds region features from the target corpus's FeatureStore (corpora/hf_dataset.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from prefect import flow, tags
from prefect.artifacts import create_table_artifact

from common.errors import InputError
from common.files import atomic_dir
from corpora.dataset_card import CardInfo, Translation
from corpora.tables import read_images
from features.store import FeatureStore
from mmt.augment import Variant
from mmt.synthesis import Origin
from mmtr.params import Params
from mmtr.stage import named, run_stage, run_tags, stage_parser
from tasks import artifact_key
from tasks.export import export_caption_variant


@flow(name="export", log_prints=True, persist_result=False)
def export(
    cards: dict[str, CardInfo],
    augmented: str,
    prepared: str,
    out: str,
    image_root: str | None,
    store: str | None,
    outside_allowed: bool = False,
) -> dict[str, dict[str, dict[str, int]]]:
    """Write ``<out>/<variant>/`` for every variant of ``cards``; returns variant -> split -> language -> rows.
    ``outside_allowed``: the embedded images' paths may lead out of ``image_root``."""
    images = read_images(Path(prepared) / "images.parquet")
    regions = FeatureStore.open(store) if store else None
    rows: dict[str, dict[str, dict[str, int]]] = {}
    with atomic_dir(out) as staged:  # every variant, or none (a killed run)
        for name, card in cards.items():
            captions = Path(augmented) / name
            if not captions.is_dir():
                raise InputError(f"{captions}: folder not found (variant {name}: run the augment stage first)")
            summary = export_caption_variant(
                str(captions), images, str(staged / name), card, image_root, regions, outside_allowed
            )
            rows[name] = summary.rows
    # one row per language rather than a column each: the UI cuts tables off after eight columns
    table = [
        {"variant": name, "split": split, "lang": lang, "rows": count}
        for name, splits in rows.items()
        for split, counts in splits.items()
        for lang, count in sorted(counts.items())
    ]
    description = "Hugging Face dataset rows per split and language"
    create_table_artifact(key=artifact_key("export-rows"), table=table, description=description)
    return rows


def variant_definition(variant: Variant) -> str:
    """``MMT(f+b): the human captions plus the mmt system's captions of hop 2 (2 passes followed)``."""
    if variant.origin is None:
        return f"{variant.display_name()}: the human captions alone"
    kept = variant.kept_hops()
    return (
        f"{variant.display_name()}: the human captions plus the {variant.origin} system's captions of "
        f"hop{'s' if len(kept) > 1 else ''} {', '.join(map(str, kept))} ({variant.hops} "
        f"pass{'es' if variant.hops > 1 else ''} followed)"
    )


def cards(params: Params, corpus: str, synthetic: str) -> dict[str, CardInfo]:
    """The dataset card facts of every variant to export (export.variants, or all of retrieval.variants).

    The card names settings the stage does not list as its params (the systems' backend, beam, extractor,
    fine-tuning corpus): each of them changes the augmented captions or the feature store, which are the stage's
    dependencies, so a change still reruns it.
    """
    source = Path(params.corpus(corpus).source).resolve()
    generated = Path(synthetic).resolve() in (source, *source.parents)
    result = {}
    for name in params.export.variants or params.retrieval.variants:
        variant = params.augment.variants[name]
        translation = None if variant.origin is None else _translation(params, variant.origin)
        settings: dict[str, object] = {
            "languages.pivot": params.languages.pivot,
            "mmt.targets": list(params.mmt.targets),
            f"variant {name}": {"origin": variant.origin, "hops": variant.hops, "keep": list(variant.keep)},
        }
        if translation is not None:
            settings |= _translation_settings(translation)
        settings |= {"export.images": params.export.images, "export.regions": params.export.regions}
        result[name] = CardInfo(
            variant=name,
            definition=variant_definition(variant),
            corpus=corpus,
            dataset=params.corpus(corpus).dataset,
            generated=generated,
            pivot=params.languages.pivot,
            targets=params.mmt.targets,
            settings=settings,
            translation=translation,
        )
    return result


def _translation(params: Params, origin: Origin) -> Translation:
    seq2seq = params.mmt.seq2seq
    return Translation(
        origin=origin,
        mt_backend=params.mmt.mt_system,
        held=dict(seq2seq.held),
        as_is=seq2seq.as_is,
        extractor=params.features.extractor,
        finetune_corpus=params.corpus_roles.mmt_finetune,
        beam=params.synthesis.beam,
        kinds=tuple(params.synthesis.kinds),
    )


def _translation_settings(translation: Translation) -> dict[str, object]:
    """The settings of the variant's system, as params.yaml names them."""
    settings: dict[str, object] = {"corpus_roles.mmt_finetune": translation.finetune_corpus}
    if translation.origin == "mmt":
        settings["features.extractor"] = translation.extractor
    else:
        settings["mmt.mt_system"] = translation.mt_backend
        if translation.mt_backend == "seq2seq":
            settings |= {"mmt.seq2seq.held": dict(translation.held), "mmt.seq2seq.as_is": translation.as_is}
    return settings | {"synthesis.kinds": list(translation.kinds), "synthesis.beam": translation.beam}


def main(argv: Sequence[str] | None = None) -> None:
    parser = stage_parser("export", __doc__ or "")
    parser.add_argument("--augmented", required=True, help="augment's folder (<variant>/captions.parquet)")
    parser.add_argument("--prepared", required=True, help="the target corpus's prepared folder (its images table)")
    parser.add_argument("--corpus", required=True, help="the target corpus (corpus_roles.target): its image folder")
    generated = "the built-in dataset's folder (paths.synthetic): corpora under it are generated data"
    parser.add_argument("--synthetic", required=True, help=generated)
    parser.add_argument("--store", required=True, help="the target corpus's FeatureStore (read with export.regions)")
    parser.add_argument("--out", required=True)

    def body(args: argparse.Namespace, params: Params) -> None:
        config = params.export
        image_root = params.corpus(args.corpus).images if config.images else None
        store = args.store if config.regions else None
        variant_cards = cards(params, args.corpus, args.synthetic)
        with tags(*run_tags("export")):
            named(export, args.params)(
                variant_cards,
                args.augmented,
                args.prepared,
                args.out,
                image_root,
                store,
                params.prepare.images_outside_root,
            )

    run_stage(parser, argv, body)


if __name__ == "__main__":
    main()
