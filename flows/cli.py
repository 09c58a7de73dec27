"""The `mmtr` command: look into params and artifacts (later stages add `translate` and `search`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

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
