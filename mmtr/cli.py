"""The `mmtr` command: check params, write the DAG (dvc.yaml) from them, inspect prepared data, translate with (M)MT,
search images by text, apply the papers' profiles, write the params schema, publish a run's results and draw its
learning curves."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import InputError
from mmtr import __version__
from mmtr.errors import ParamsError, add_debug_flag, user_errors

if TYPE_CHECKING:
    from mmtr.defaults import Defaults

# The parser is built from the standard library alone, so that `mmtr --help` (and a typo in a command) answers at
# once: each command imports what it needs (torch, pyarrow, Prefect) when it runs.

# Where the defaults of `translate` and `search` come from (mmtr/defaults.py reads them from --params).
PARAMS_HELP = "the params file the defaults below come from; its paths are taken from its folder (default: params.yaml)"
DEVICE_HELP = "cpu, cuda, cuda:<index> or auto: CUDA when there is one (default: the params' device)"
STORE_DEFAULT = "<paths.features>/<corpus_roles.target>/<features.extractor>"
FROM_PARAMS = object()  # `translate --store` given without a folder: the params' FeatureStore


def check_params(args: argparse.Namespace) -> None:
    from mmtr.params import load_params

    params = load_params(args.params)
    print(f"{args.params}: valid")
    print(f"  languages: {', '.join(params.languages.all)} (pivot {params.languages.pivot})")
    for name, corpus in params.corpora.items():
        print(f"  corpus {name}: {corpus.format} format from {corpus.source}, images in {corpus.images}")
    roles = params.corpus_roles
    print(
        f"  corpus roles: MMT pre-trained on {params.paths.parallel}, fine-tuned on {roles.mmt_finetune}; "
        f"target (augmented, retrieval) {roles.target}"
    )
    print(f"  device:    {params.device}, precision {params.precision}, seed {params.seed}")
    retrieval = params.retrieval
    runs = len(retrieval.models) * len(retrieval.variants) * len(retrieval.roles)
    print(
        f"  retrieval: {runs} runs = models {', '.join(retrieval.models)} x variants {', '.join(retrieval.variants)}"
        f" x roles {', '.join(retrieval.roles)}"
        + (f", {retrieval.replicates} seeds each" if retrieval.replicates > 1 else "")
    )
    for name in retrieval.roles:
        role = retrieval.role(name, params.languages.pivot)
        kept = ", ".join(f"{lang}:{origin}" if origin else lang for lang, origin in role.train)
        setup = role.setup.describe()
        print(
            f"    {name}: trains on {kept}; tested on {', '.join(role.test)}" + (f"; setup: {setup}" if setup else "")
        )


def inspect(args: argparse.Namespace) -> None:
    """One prepared corpus folder, or every corpus (and the parallel text) under a prepared root."""
    from corpora.prepared import count_parallel, read_parallel_tables

    root = Path(args.prepared)
    if (root / "images.parquet").is_file():
        _inspect_corpus(root, args.samples)
        return
    corpora = sorted(path.parent for path in root.glob("*/images.parquet"))
    if not corpora and not (root / "parallel").is_dir():
        raise InputError(f"{root}: no prepared corpus here (run `dvc repro prepare` first)")
    for folder in corpora:
        print(f"== {folder.name}")
        _inspect_corpus(folder, args.samples)
    if (root / "parallel").is_dir():
        print("== parallel")
        _print_rows(count_parallel(read_parallel_tables(root / "parallel")))


def _inspect_corpus(folder: Path, samples: int) -> None:
    import pyarrow.compute as pc

    from common.text_input import shown
    from corpora.prepared import count_captions, read_prepared

    corpus = read_prepared(folder)
    _print_rows(count_captions(corpus))
    captions = corpus.captions
    for lang in sorted(pc.unique(captions.column("lang")).to_pylist()):
        sample = captions.filter(pc.equal(captions.column("lang"), lang)).slice(0, samples)
        for caption_id, text in zip(
            sample.column("caption_id").to_pylist(), sample.column("text").to_pylist(), strict=True
        ):
            print(f"{shown(caption_id):<24} {shown(text)}")  # a control character must not reach the terminal


def _print_rows(rows: list[dict[str, object]]) -> None:
    if not rows:
        return
    print("  ".join(f"{name:>12}" for name in rows[0]))
    for row in rows:
        print("  ".join(f"{value!s:>12}" for value in row.values()))
    print()


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count, a beam width)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def read_input_lines(name: str) -> list[str]:
    """The lines of the file ``name`` (``-``: standard input), UTF-8 with an optional byte-order mark.

    Raises:
        InputError: a missing or unreadable file, or bytes that are not UTF-8 (the line is named).
    """
    where = "<stdin>" if name == "-" else name
    try:
        if name == "-":  # bytes, so that bad UTF-8 is named here; a text-only stream (tests) as it is
            raw = getattr(sys.stdin, "buffer", None)
            data = raw.read() if raw is not None else sys.stdin.read().encode("utf-8")
        else:
            data = Path(name).read_bytes()
    except OSError as error:
        raise InputError(f"{where}: cannot read it ({error.strerror or error})") from None
    data = data.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark is no part of the first line
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise InputError(f"{where}:{line}: not UTF-8 (byte {error.start}: {error.reason})") from None


def translate(args: argparse.Namespace) -> None:
    """Translate sentences (one per line) from a file or stdin with a trained system of any backend (through the
    registry of ``mmt.systems``); with --store, each line is `image_id<TAB>text`."""
    from common.checkpoints import checkpoint_stem
    from common.runtime import Runtime
    from mmt import systems
    from mmt.checkpoint import FINETUNE
    from mmt.translator import MMTTranslator
    from mmt.translator_protocol import Translator
    from mmtr.defaults import Defaults

    defaults = Defaults(args.params)
    model_dir = _translation_system(args, defaults)
    backend = systems.system_backend(model_dir)
    languages = systems.system_languages(model_dir)
    if languages != (args.src, args.tgt):
        raise InputError(f"{model_dir} translates {languages[0]}->{languages[1]}, not {args.src}->{args.tgt}")
    if backend.multimodal and not args.store:
        raise InputError(
            f"{model_dir}: a multimodal system reads each sentence's image regions: give --store "
            f"(alone: the params' FeatureStore)"
        )
    store_path = args.store
    if store_path is FROM_PARAMS:  # a text-only system reads no regions: the folder need not be there
        store_path = defaults.feature_store() if backend.multimodal else None
    store = None
    if store_path and backend.multimodal:
        from features.store import FeatureStore  # pyarrow: only a system that reads regions waits for it

        store = FeatureStore.open(store_path)
    lines, listed_ids = _input_sentences(args.input, with_images=bool(args.store))  # bad input fails before loading
    device = defaults.device(args.device)
    translator: Translator
    if checkpoint_stem(args.checkpoint).name != FINETUNE:  # another checkpoint of a regional system: pretrain
        translator = MMTTranslator.load(model_dir, args.checkpoint, regions=None, device=device)
        store = None
    else:
        translator = systems.load_system(
            str(model_dir), str(store_path) if store else None, Runtime(str(device), "fp32")
        )
    image_ids = listed_ids if store is not None else None
    for output in translator.translate(lines, image_ids, beam=args.beam):
        print(output)


def _input_sentences(name: str, *, with_images: bool) -> tuple[list[str], list[str]]:
    """The sentences of the input file ``name`` (``-``: stdin), cleaned (NFC, no control characters), and with
    ``with_images`` the image id before each (a line is ``image_id<TAB>sentence``)."""
    from common.text_input import normalize

    lines = read_input_lines(name)
    image_ids: list[str] = []
    if with_images:  # lines carry their image; a text-only system ignores it
        pairs = [line.split("\t", 1) for line in lines]
        bad = [number for number, pair in enumerate(pairs, start=1) if len(pair) != 2]
        if bad:
            raise InputError(f"{name}:{bad[0]}: with --store every line is image_id<TAB>sentence")
        image_ids, lines = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    where = "<stdin>" if name == "-" else name
    return [normalize(line, f"{where}:{number}") for number, line in enumerate(lines, start=1)], image_ids


def _translation_system(args: argparse.Namespace, defaults: Defaults) -> Path:
    """The system folder: --model, else ``mmt-<src>-<tgt>`` in --models or the params' ``<paths.models>/mmt``."""
    from_params = not (args.model or args.models)
    if args.model:
        model_dir = Path(args.model)
    else:
        model_dir = (Path(args.models) if args.models else defaults.mmt_models()) / f"mmt-{args.src}-{args.tgt}"
    if not model_dir.is_dir():
        stage = defaults.mmt_stage(args.src, args.tgt) if from_params else "train_mmt@<target>"
        raise InputError(f"{model_dir}: no trained model for {args.src}->{args.tgt} (train it: dvc repro {stage})")
    return model_dir


def search(args: argparse.Namespace) -> None:
    """Rank gallery images for a text query with a trained retrieval model."""
    import pyarrow.parquet as pq

    from common.checkpoints import checkpoint_files
    from common.files import user_cache_dir
    from features.store import FeatureStore
    from mmtr.defaults import Defaults
    from retrieval.checkpoint import MODEL, load_retrieval
    from retrieval.search import cache_file, describe, fingerprint, gallery_embeddings, hits_json
    from retrieval.search import search as run_search

    defaults = Defaults(args.params)
    model_dir = Path(args.model) if args.model else defaults.retrieval_model()
    device = defaults.device(args.device)
    loaded = load_retrieval(model_dir / MODEL, device=device)
    store_path = Path(args.store) if args.store else defaults.feature_store()
    if not store_path.is_dir():
        raise InputError(f"{store_path}: feature store not found (pass --store)")
    store = FeatureStore.open(store_path)
    images_path = (Path(args.prepared) if args.prepared else defaults.prepared()) / "images.parquet"
    if not images_path.is_file():
        raise InputError(f"{images_path}: prepared images table not found (pass --prepared)")
    # ParquetFile, not read_table, which imports pyarrow.dataset and pandas (features/store_format.py)
    with pq.ParquetFile(images_path) as file:
        images = file.read(columns=["image_id", "split", "path"]).to_pylist()
    wanted = [row for row in images if args.split == "all" or row["split"] == args.split]
    in_store = set(store.image_ids)
    image_ids = [row["image_id"] for row in wanted if row["image_id"] in in_store]
    if not image_ids:
        raise InputError(f"{images_path}: no {args.split!r} images have features in {store_path}")
    image_root = Path(args.images) if args.images else defaults.images()
    paths = {row["image_id"]: str(image_root / row["path"]) for row in wanted}
    files = checkpoint_files(model_dir / MODEL)
    identity = fingerprint(files.weights, files.fields, store_path / "regions.npy", store_path / "index.parquet")
    cache = cache_file(Path(args.cache_dir) if args.cache_dir else user_cache_dir(), identity, args.split)
    gallery = gallery_embeddings(
        loaded, store, image_ids, store.rows(image_ids), cache=cache, identity=identity, device=device
    )
    hits = run_search(loaded, gallery, image_ids, " ".join(args.query), args.lang, k=args.k, device=device)
    print(hits_json(hits, paths) if args.json else describe(hits, paths))


def profile(args: argparse.Namespace) -> None:
    """List the profiles, or merge one into the params file (and run it as a DVC experiment)."""
    import subprocess

    from mmtr.profiles import apply_profile, profile_names, profile_summary

    if args.name is None:
        for name in profile_names():
            print(f"{name:<10} {profile_summary(name)}")
        return
    out = Path(args.out or args.params)
    if args.run_experiment and out != Path(args.params):
        raise ParamsError("--run runs the experiment from the params file itself; drop --out")
    params = apply_profile(args.name, Path(args.params), out)
    retrieval = params.retrieval
    runs = len(retrieval.models) * len(retrieval.variants) * len(retrieval.roles)
    print(f"{out}: profile {args.name} applied: {profile_summary(args.name)}")
    if out == Path(args.params):
        write_dag(out)
    print(
        f"  corpus roles: MMT fine-tuned on {params.corpus_roles.mmt_finetune}, target {params.corpus_roles.target};"
        f" {runs} retrieval runs"
    )
    if args.run_experiment:
        command = ["dvc", "exp", "run", "-n", args.name]
        print(" ".join(command), flush=True)
        done = subprocess.run(command, check=False)
        if done.returncode != 0:
            raise SystemExit(done.returncode)


def grid(args: argparse.Namespace) -> None:
    """Train the retrieval runs as queued DVC experiments, ``--jobs`` at a time, then gather them and the report."""
    from mmtr.grid import grid as run_grid
    from mmtr.profiles import apply_profile, profile_summary

    if args.profile:
        if args.dry_run:
            raise ParamsError(f"--dry-run changes nothing: apply the profile first (mmtr profile {args.profile})")
        apply_profile(args.profile, Path(args.params), Path(args.params))
        print(f"{args.params}: profile {args.profile} applied: {profile_summary(args.profile)}")
        write_dag(Path(args.params))
    run_grid(Path(args.params), args.jobs, dry_run=args.dry_run)


def dag(args: argparse.Namespace) -> None:
    """Write dvc.yaml from the params file (or, with --check, exit 1 when it is not the one they give)."""
    from mmtr.dvc_yaml import update_dvc_yaml

    print(update_dvc_yaml(Path(args.params), check_only=args.check))


def write_dag(params_file: Path) -> None:
    from mmtr.dvc_yaml import update_dvc_yaml

    print(update_dvc_yaml(params_file))


def schema(args: argparse.Namespace) -> None:
    """Print the JSON schema of params.yaml, or write it to --out."""
    from common.files import write_text
    from mmtr.schema import schema_text

    text = schema_text()
    if args.out is None:
        sys.stdout.write(text)
        return
    write_text(args.out, text)
    print(f"{args.out}: the JSON schema of params.yaml")


def results(args: argparse.Namespace) -> None:
    """Publish the last pipeline run: docs/results.md, the README's results and DAG blocks, the rsum chart."""
    from mmtr.params import load_params
    from mmtr.results_page import write_results

    params = load_params(args.params)
    repo = Path(args.params).resolve().parent
    stages = Path(args.stages) if args.stages else repo / params.paths.work / "pipeline-stages.json"
    command = "mmtr results" + ("" if args.params == "params.yaml" else f" --params {args.params}")
    for path in write_results(params, repo, stages_file=stages, command=command):
        print(f"{path.relative_to(repo)}: written")


def plots(args: argparse.Namespace) -> None:
    """Draw the learning curves (dvc.yaml's plots) into a page that loads nothing from the network."""
    from mmtr.plots import DEFAULT_OUT, draw, repository_root, use_offline_template

    repo = repository_root(Path.cwd())
    out = Path(args.out) if args.out else repo / DEFAULT_OUT
    page = draw(repo, out)
    print(f"{page}: the learning curves (open it in a browser; it draws offline)")
    print(use_offline_template(repo))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmtr", description="Multilingual image-text retrieval with MT-grown data.")
    parser.add_argument("--version", action="version", version=f"mmtr {__version__}")
    add_debug_flag(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check-params", help="validate params.yaml and summarise it")
    check.add_argument("--params", default="params.yaml")
    check.set_defaults(run=check_params)
    graph = commands.add_parser("dag", help="write the pipeline DAG, dvc.yaml, from params.yaml (after editing it)")
    graph.add_argument("--params", default="params.yaml", help="the params file; dvc.yaml is written beside it")
    graph.add_argument("--check", action="store_true", help="write nothing; exit 1 when dvc.yaml is out of date")
    graph.set_defaults(run=dag)
    show = commands.add_parser("inspect", help="validate a prepared folder and print its counts and samples")
    show.add_argument("prepared", nargs="?", default="data/prepared", help="a prepared corpus, or the root of all")
    show.add_argument("--samples", type=positive_int, default=3, help="captions shown per language")
    show.set_defaults(run=inspect)
    add_translate(commands)
    add_search(commands)
    prof = commands.add_parser("profile", help="apply one of the papers' experiments (profiles/<name>.yaml)")
    prof.add_argument("name", nargs="?", help="profile name (omit to list them)")
    prof.add_argument("--params", default="params.yaml", help="the params file to merge it into")
    prof.add_argument("--out", help="write the merged params here instead of over --params")
    prof.add_argument("--run", dest="run_experiment", action="store_true", help="then run it: dvc exp run -n <name>")
    prof.set_defaults(run=profile)
    queued = commands.add_parser(
        "grid", help="train the retrieval runs as queued DVC experiments, several at once, then write the report"
    )
    queued.add_argument("--params", default="params.yaml", help="the params file in the repository root")
    queued.add_argument(
        "--jobs", "-j", type=positive_int, default=2, help="queue workers: runs trained at once (default 2)"
    )
    queued.add_argument("--profile", help="merge this profile into --params first, as `mmtr profile <name>` does")
    queued.add_argument("--dry-run", action="store_true", help="print the commands it would run; change nothing")
    queued.set_defaults(run=grid)
    schema_command = commands.add_parser("schema", help="print the JSON schema of params.yaml (for editors)")
    schema_command.add_argument("--out", help="write it to this file instead (the repository keeps params.schema.json)")
    schema_command.set_defaults(run=schema)
    publish = commands.add_parser(
        "results", help="write docs/results.md and the README's results from the last run's metrics files"
    )
    publish.add_argument("--params", default="params.yaml", help="the params of the run (its paths: metrics, work)")
    publish.add_argument(
        "--stages", help="the pipeline flow's stage record (default: <paths.work>/pipeline-stages.json, if present)"
    )
    publish.set_defaults(run=results)
    draw = commands.add_parser("plots", help="draw the learning curves into a web page that works offline")
    draw.add_argument("--out", help="folder of the page, index.html (default: dvc_plots in the repository)")
    draw.set_defaults(run=plots)
    return parser


def add_translate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    trans = commands.add_parser("translate", help="translate sentences with a trained (M)MT model")
    trans.add_argument("--src", required=True, help="source language, e.g. en")
    trans.add_argument("--tgt", required=True, help="target language, e.g. de")
    trans.add_argument("--params", default="params.yaml", help=PARAMS_HELP)
    trans.add_argument("--model", help="system folder (default: <models>/mmt-<src>-<tgt>)")
    trans.add_argument("--models", help="folder of trained systems (default: <paths.models>/mmt)")
    trans.add_argument(
        "--checkpoint",
        default="finetune",
        help="finetune (default) or, for a regional system, pretrain (text-only); a .safetensors or an earlier .pt "
        "file name of the system folder works too",
    )
    trans.add_argument(
        "--store",
        nargs="?",
        const=FROM_PARAMS,
        help=f"FeatureStore folder: translate with image regions, lines image_id<TAB>text (--store "
        f"alone: {STORE_DEFAULT})",
    )
    trans.add_argument("--input", default="-", help="file of sentences, one per line (default: stdin)")
    trans.add_argument("--beam", type=positive_int, default=5, help="beam width (default 5)")
    trans.add_argument("--device", help=DEVICE_HELP)
    trans.set_defaults(run=translate)


def add_search(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    find = commands.add_parser("search", help="search images by text with a trained retrieval model")
    find.add_argument("query", nargs="+", help="the query text")
    find.add_argument("--lang", required=True, help="language of the query (one the model was trained on)")
    find.add_argument("--params", default="params.yaml", help=PARAMS_HELP)
    find.add_argument(
        "--model",
        help="model folder (default: <paths.models>/retrieval/<model>-<variant>-<role>, the "
        "first of retrieval.models, retrieval.variants and retrieval.roles)",
    )
    find.add_argument("-k", type=positive_int, default=5, help="how many images to list (default 5)")
    find.add_argument("--split", default="test", help="gallery: images of this split, or all (default test)")
    find.add_argument("--store", help=f"FeatureStore folder (default: {STORE_DEFAULT})")
    find.add_argument(
        "--prepared", help="the prepared corpus, its images.parquet (default: <paths.prepared>/<corpus_roles.target>)"
    )
    find.add_argument(
        "--images", help="image folder the paths are under (default: corpora.<corpus_roles.target>.images)"
    )
    find.add_argument("--json", action="store_true", help="print JSON instead of a table")
    find.add_argument(
        "--cache-dir",
        help="where gallery embeddings are cached (default: $MMTR_CACHE_DIR, else "
        "$XDG_CACHE_HOME/mmtr or ~/.cache/mmtr; never the model folder, a DVC output)",
    )
    find.add_argument("--device", help=DEVICE_HELP)
    find.set_defaults(run=search)


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    with user_errors("mmtr", debug=args.debug):
        args.run(args)


if __name__ == "__main__":
    main()
