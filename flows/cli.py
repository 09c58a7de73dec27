"""The `mmtr` command: look into params and artifacts (later stages add `translate` and `search`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow.compute as pc

from corpora.io import InputError
from corpora.prepared import read_prepared
from flows.params import ParamsError, load_params
from tasks.data import count_captions, count_parallel


def check_params(args: argparse.Namespace) -> None:
    params = load_params(args.params)
    print(f"{args.params}: valid")
    print(f"  languages: {', '.join(params.languages.all)} (pivot {params.languages.pivot})")
    print(f"  dataset:   {params.prepare.format} format from {params.paths.source}")
    print(f"  device:    {params.device}, precision {params.precision}, seed {params.seed}")


def inspect(args: argparse.Namespace) -> None:
    corpus = read_prepared(args.prepared)
    for rows in (count_captions(corpus), count_parallel(corpus)):
        _print_rows(rows)
    captions = corpus.captions
    for lang in sorted(pc.unique(captions.column("lang")).to_pylist()):
        sample = captions.filter(pc.equal(captions.column("lang"), lang)).slice(0, args.samples)
        for caption_id, text in zip(
            sample.column("caption_id").to_pylist(), sample.column("text").to_pylist(), strict=True
        ):
            print(f"{caption_id:<24} {text}")


def _print_rows(rows: list[dict[str, object]]) -> None:
    if not rows:
        return
    print("  ".join(f"{name:>12}" for name in rows[0]))
    for row in rows:
        print("  ".join(f"{value!s:>12}" for value in row.values()))
    print()


def translate(args: argparse.Namespace) -> None:
    """Translate sentences (one per line) from a file or stdin; with --store, each line is `image_id<TAB>text`."""
    import torch

    from features.store import FeatureStore
    from mmt.translator import MMTTranslator

    model_dir = Path(args.model) if args.model else Path(args.models) / f"mmt-{args.src}-{args.tgt}"
    if not model_dir.is_dir():
        raise InputError(
            f"{model_dir}: no trained model for {args.src}->{args.tgt} (train it: dvc repro train_mmt@...)"
        )
    text_json = json.loads((model_dir / "text.json").read_text(encoding="utf-8"))
    if (text_json["src_lang"], text_json["tgt_lang"]) != (args.src, args.tgt):
        raise InputError(
            f"{model_dir} translates {text_json['src_lang']}->{text_json['tgt_lang']}, not {args.src}->{args.tgt}"
        )
    store = FeatureStore.open(args.store) if args.store else None
    translator = MMTTranslator.load(model_dir, args.checkpoint, regions=store, device=torch.device(args.device))
    if args.input == "-":
        lines = sys.stdin.read().splitlines()
    else:
        lines = Path(args.input).read_text(encoding="utf-8").splitlines()
    image_ids = None
    if store is not None:
        pairs = [line.split("\t", 1) for line in lines]
        bad = [number for number, pair in enumerate(pairs, start=1) if len(pair) != 2]
        if bad:
            raise InputError(f"{args.input}:{bad[0]}: with --store every line is image_id<TAB>sentence")
        image_ids, lines = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    for output in translator.translate(lines, image_ids, beam=args.beam):
        print(output)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmtr", description="Multilingual image-text retrieval with MT-grown data.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check-params", help="validate params.yaml and summarise it")
    check.add_argument("--params", default="params.yaml")
    check.set_defaults(run=check_params)
    show = commands.add_parser("inspect", help="validate a prepared folder and print its counts and samples")
    show.add_argument("prepared", nargs="?", default="data/prepared")
    show.add_argument("--samples", type=int, default=3, help="captions shown per language")
    show.set_defaults(run=inspect)
    trans = commands.add_parser("translate", help="translate sentences with a trained (M)MT model")
    trans.add_argument("--src", required=True, help="source language, e.g. en")
    trans.add_argument("--tgt", required=True, help="target language, e.g. de")
    trans.add_argument("--model", help="model folder (default: <models>/mmt-<src>-<tgt>)")
    trans.add_argument("--models", default="data/models/mmt", help="folder of trained systems")
    trans.add_argument("--checkpoint", default="finetune.pt", help="finetune.pt (default) or pretrain.pt")
    trans.add_argument("--store", help="FeatureStore folder: translate with image regions (lines: image_id<TAB>text)")
    trans.add_argument("--input", default="-", help="file of sentences, one per line (default: stdin)")
    trans.add_argument("--beam", type=int, default=5)
    trans.add_argument("--device", default="cpu")
    trans.set_defaults(run=translate)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (ParamsError, InputError) as error:
        print(f"mmtr: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
