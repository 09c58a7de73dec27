"""dvc.yaml, written from params.yaml: every stage depends on exactly what it reads.

DVC's templating cannot make a stage conditional nor give the stages of one ``foreach`` dependency lists of their
own length, so the DAG is generated here from the validated :class:`~mmtr.params.Params`:

- the built-in world (`generate`) is a stage only when a corpus or the parallel text lies in ``paths.synthetic``;
- `prepare@<corpus>` reads every language its source holds, so adding a language does not rerun it;
- `prepare_parallel@<target>`, `train_mmt@<target>` and `synthesize@<target>` exist per language of
  ``mmt.targets`` and read that pair's text and the MT model folders of that pair alone;
- corpora over the same image folder share one FeatureStore, `features@<image set>`, which depends on the
  prepared images tables of those corpora and the very files its extractor reads (a checkpoint, import files),
  never on the whole ``paths.feature_inputs`` folder;
- a retrieval run depends on its variant's captions in the languages it reads (``retrieval.languages``), its own
  model and role settings, and the shared training settings;
- the learning curves are drawn by one chart (:class:`Plot`) per MMT language pair and per retrieval model, the runs
  overlaid, each chart titled by what it shows.

:mod:`mmtr.dvc_yaml` writes the stages as dvc.yaml (``mmtr dag``), and every stage command checks that dvc.yaml is
still the one params.yaml gives, so a params edit that changes the DAG is never run against a stale one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from corpora.prepared import caption_variant_file, parallel_table_name
from mmtr.errors import ParamsError
from mmtr.params import Params, Paths
from retrieval.config import RetrievalConfig
from retrieval.roles import PRESETS

# the code each stage runs (tests/repository/test_stage_deps.py checks it against the imports of its flow)
STAGE_CODE: dict[str, tuple[str, ...]] = {
    "generate": ("corpora", "common", "flows/generate.py", "tasks/__init__.py", "tasks/data.py"),
    "prepare": ("corpora", "common", "flows/prepare.py", "tasks/__init__.py", "tasks/data.py"),
    "prepare_parallel": ("corpora", "common", "flows/prepare_parallel.py", "tasks/__init__.py", "tasks/data.py"),
    "features": ("corpora", "features", "common", "flows/features.py", "tasks/__init__.py", "tasks/features.py"),
    "train_mmt": ("corpora", "features", "mmt", "common", "flows/train_mmt.py", "tasks/__init__.py", "tasks/mmt.py"),
    "synthesize": (
        "corpora",
        "features",
        "mmt",
        "common",
        "flows/synthesize.py",
        "tasks/__init__.py",
        "tasks/mmt.py",
    ),
    "augment": (
        "corpora",
        "mmt/__init__.py",
        "mmt/augment.py",
        "mmt/diversity.py",
        "mmt/synthesis.py",
        "common",
        "flows/augment.py",
        "tasks/__init__.py",
    ),
    "export": (
        "corpora",
        "features/__init__.py",
        "features/npy.py",
        "features/regions.py",
        "features/store.py",
        "features/store_format.py",
        "mmt/__init__.py",
        "mmt/augment.py",
        "mmt/synthesis.py",
        "common",
        "flows/export.py",
        "tasks/__init__.py",
        "tasks/export.py",
    ),
    "translate_queries": (
        "corpora",
        "features",
        "mmt",
        "common",
        "flows/translate_queries.py",
        "tasks/__init__.py",
        "tasks/mmt.py",
    ),
    "train_retrieval": (
        "corpora",
        "features",
        "mmt",
        "retrieval",
        "common",
        "flows/train_retrieval.py",
        "tasks/__init__.py",
        "tasks/retrieval.py",
    ),
    "report": (
        "corpora",
        "report",
        "retrieval/__init__.py",
        "retrieval/significance.py",
        "common",
        "flows/report.py",
        "tasks/__init__.py",
        "tasks/report.py",
    ),
}


@dataclass(frozen=True)
class Plot:
    """One chart of dvc.yaml's top-level ``plots``: every column of every file in ``y`` drawn over ``x``, a line per
    file and column (and per seed, where a file holds several; the template ``.dvc/plots/learning_curve.json``)."""

    id: str
    title: str
    x: str
    y: tuple[tuple[str, tuple[str, ...]], ...]  # (file, its columns drawn) in legend order
    x_label: str
    y_label: str


@dataclass(frozen=True)
class Stage:
    """One stage as DVC resolves it: its command and exactly what it reads and writes."""

    cmd: str
    deps: tuple[str, ...]  # the data it reads (the code it runs is its group's, STAGE_CODE)

    def __post_init__(self) -> None:
        for name in ("deps", "params", "outs", "uncached", "metrics"):
            if not isinstance(getattr(self, name), tuple):
                raise TypeError(f"Stage.{name} must be a tuple of paths or keys")

    params: tuple[str, ...]
    outs: tuple[str, ...] = ()
    uncached: tuple[str, ...] = ()  # git-tracked outputs that are not metrics (notes, learning curves)
    metrics: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageSet:
    """Corpora whose images lie in one folder: one FeatureStore, one `features@<name>` stage."""

    name: str
    corpora: tuple[str, ...]
    images: str
    boxes: str


@dataclass
class Pipeline:
    """The stages by group, in DAG order (a group of one unnamed stage is a plain stage, else a ``foreach``), and the
    charts of their learning curves."""

    groups: dict[str, dict[str | None, Stage]] = field(default_factory=dict)
    plots: list[Plot] = field(default_factory=list)

    def add(self, group: str, stage: Stage, key: str | None = None) -> None:
        self.groups.setdefault(group, {})[key] = stage

    def names(self) -> list[str]:
        """Every stage as DVC addresses it (``features@synthetic``)."""
        return [group if key is None else f"{group}@{key}" for group, stages in self.groups.items() for key in stages]


def image_sets(params: Params) -> dict[str, ImageSet]:
    """Corpora grouped by image folder. A set is named by its corpora's ``image_set`` (the same for every corpus of
    the folder), else after its first corpus in params order. Raises ParamsError on conflicting names or boxes."""
    by_folder: dict[str, list[str]] = {}
    for name, corpus in params.corpora.items():
        by_folder.setdefault(str(PurePosixPath(corpus.images)), []).append(name)
    sets: dict[str, ImageSet] = {}
    for folder, names in by_folder.items():
        named = {image_set for name in names if (image_set := params.corpora[name].image_set) is not None}
        if len(named) > 1:
            raise ParamsError(
                f"params.yaml: corpora {', '.join(names)} share the image folder {folder} but name different image "
                f"sets {sorted(str(n) for n in named)}; give them one image_set (they share one feature store)"
            )
        set_name = named.pop() if named else names[0]
        boxes = {params.corpora[name].boxes for name in names}
        if len(boxes) > 1:
            raise ParamsError(
                f"params.yaml: corpora {', '.join(names)} share the image folder {folder} but not the boxes file "
                f"({', '.join(sorted(boxes))}); one image set has one boxes file"
            )
        if set_name in sets:
            raise ParamsError(
                f"params.yaml: image set {set_name!r} names two image folders ({sets[set_name].images}, {folder}); "
                "name each folder's image set once"
            )
        sets[set_name] = ImageSet(set_name, tuple(names), params.corpora[names[0]].images, boxes.pop())
    return sets


def image_set_of(params: Params, corpus: str) -> str:
    """The image set (feature store name) of ``corpus``."""
    return next(name for name, images in image_sets(params).items() if corpus in images.corpora)


def feature_store(params: Params, corpus: str) -> str:
    """The FeatureStore folder ``corpus``'s images are featurized into."""
    return f"{params.paths.features}/{image_set_of(params, corpus)}/{params.features.extractor}"


def extractor_reads(params: Params, root: Path) -> list[str]:
    """The files the extractor reads from ``paths.feature_inputs`` (looked for under ``root``), and, for the compact
    preset on the built-in world, the training images it learns from."""
    config, inputs = params.features, params.paths.feature_inputs
    reads = [f"{inputs}/{name}" for name in config.input_files(root / inputs)]
    if config.extractor == "compact" and params.builtin_world_in_use():
        synthetic = params.paths.synthetic
        reads += [f"{synthetic}/images", f"{synthetic}/objects.parquet", f"{synthetic}/task1/image_splits/train.txt"]
    return reads


def prepare_reads(params: Params, name: str) -> tuple[str, ...]:
    """What `prepare@<name>` reads: its source and its images (their sizes). A Hugging Face dataset is read from its
    folder, or from its entry in the `datasets` cache, and may write its embedded images into ``images``: then the
    image folder is an input of `features`, not of `prepare`."""
    corpus = params.corpora[name]
    if corpus.format != "hf":
        return (corpus.source, corpus.images)
    cache = params.prepare.hf.cache_dir
    return (f"{cache}/{corpus.source.replace('/', '___')}",) if cache else (corpus.source,)


def mt_model_folders(params: Params, target: str, root: Path) -> list[str]:
    """The held MT model folders of the pair pivot<->``target`` (``mmt.seq2seq.held``) that lie in
    ``paths.mt_models``; a model id read from the Hugging Face cache lives outside the repository (the system's
    ``origin.json`` records its revision)."""
    pivot = params.languages.pivot
    held = params.mmt.seq2seq.held
    folders = [
        f"{params.paths.mt_models}/{held[pair]}" for pair in (f"{pivot}-{target}", f"{target}-{pivot}") if pair in held
    ]
    return [folder for folder in folders if (root / folder).is_dir()]


@dataclass(frozen=True)
class _Context:
    """What every stage builder reads: the params, the ``--params`` flag of the commands, the repository root."""

    params: Params
    flag: str
    root: Path

    @property
    def paths(self) -> Paths:
        return self.params.paths

    @property
    def pivot(self) -> str:
        return self.params.languages.pivot

    @property
    def finetune(self) -> str:
        return self.params.corpus_roles.mmt_finetune

    @property
    def target_corpus(self) -> str:
        return self.params.corpus_roles.target

    @property
    def models(self) -> str:
        return f"{self.params.paths.models}/mmt"

    @property
    def target_store(self) -> str:
        return feature_store(self.params, self.target_corpus)


def build_pipeline(params: Params, params_file: str = "params.yaml", root: Path = Path()) -> Pipeline:
    """Every stage of the experiment ``params`` describes, in DAG order (``root``: the repository, where params'
    relative paths start; where a stage reads a file only if it exists, e.g. a SCAN ids file, it is looked for
    there)."""
    pipeline = Pipeline()
    context = _Context(params, f"--params {params_file}", root)
    for add_stages in (
        _generate,
        _prepare,
        _prepare_parallel,
        _features,
        _train_mmt,
        _synthesize,
        _augment,
        _export,
        _translate_queries,
        _train_retrieval,
        _report,
    ):
        add_stages(context, pipeline)
    return pipeline


def _generate(c: _Context, pipeline: Pipeline) -> None:
    """The built-in world, when a corpus or the parallel text is read from it."""
    params, paths, p = c.params, c.paths, c.flag
    if params.builtin_world_in_use():
        pipeline.add(
            "generate",
            Stage(
                f"python -m flows.generate {p} --out {paths.synthetic}",
                (),
                ("seed", "languages", "generate"),
                outs=(paths.synthetic,),
            ),
        )


def _prepare(c: _Context, pipeline: Pipeline) -> None:
    """One per corpus: its source (and image sizes), every language it holds."""
    params, paths, p = c.params, c.paths, c.flag
    for name, corpus in params.corpora.items():
        pipeline.add(
            "prepare",
            Stage(
                f"python -m flows.prepare {p} --corpus {name} --out {paths.prepared}/{name}",
                prepare_reads(params, name),
                (
                    "languages.pivot",
                    "prepare.read_image_sizes",
                    "prepare.text",
                    # the later stages that open images read it too, but it only refuses or allows, never changes
                    # their outputs: prepare rerunning (and refusing) when it is turned off is enough
                    "prepare.images_outside_root",
                    f"prepare.{corpus.format}",
                    f"corpora.{name}",
                ),
                outs=(f"{paths.prepared}/{name}",),
            ),
            key=name,
        )


def _prepare_parallel(c: _Context, pipeline: Pipeline) -> None:
    """One per target language: that pair of the text-only corpus."""
    params, paths, pivot, p = c.params, c.paths, c.pivot, c.flag
    for target in params.mmt.targets:
        pair = parallel_table_name(pivot, target)
        pipeline.add(
            "prepare_parallel",
            Stage(
                f"python -m flows.prepare_parallel {p} --target {target} --parallel {paths.parallel} "
                f"--out {paths.prepared}/parallel/{pair}",
                (f"{paths.parallel}/{pivot}-{target}",),
                ("languages.pivot", "prepare.parallel", "prepare.text"),
                outs=(f"{paths.prepared}/parallel/{pair}",),
            ),
            key=target,
        )


def _features(c: _Context, pipeline: Pipeline) -> None:
    """One per image set: every image its corpora list, from the files its extractor reads."""
    params, paths, p = c.params, c.paths, c.flag
    extractor = params.features.extractor
    reads = extractor_reads(params, c.root)
    given_boxes = params.features.regions.mode == "given"
    for set_name, images in image_sets(params).items():
        prepared = [f"{paths.prepared}/{corpus}" for corpus in images.corpora]
        store = f"{paths.features}/{set_name}/{extractor}"
        metrics = f"{paths.metrics}/features/{set_name}-{extractor}.json"
        detector = (
            f" --detector-data {paths.synthetic}" if extractor == "compact" and params.builtin_world_in_use() else ""
        )
        cmd = (
            f"python -m flows.features {p} "
            + " ".join(f"--prepared {folder}" for folder in prepared)
            + f" --images {images.images} --boxes {images.boxes} --inputs {paths.feature_inputs}"
            f" --work {paths.work}/features/{set_name} --out {store} --metrics {metrics}{detector}"
        )
        checked = tuple(f"{folder}/captions.parquet" for folder in prepared) if extractor == "scan-npy" else ()
        deps = (
            *(f"{folder}/images.parquet" for folder in prepared),
            *checked,
            images.images,
            *((images.boxes,) if given_boxes else ()),
            *reads,
        )
        feature_params = tuple(f"features.{name}" for name in params.features.settings_read())
        pipeline.add(
            "features",
            Stage(cmd, deps, ("seed", "device", "precision", *feature_params), outs=(store,), metrics=(metrics,)),
            key=set_name,
        )


def _train_mmt(c: _Context, pipeline: Pipeline) -> None:
    """One per target language: both directions' MMT and text-only MT, from that pair's text and held models."""
    params, paths, pivot, p, finetune, models = c.params, c.paths, c.pivot, c.flag, c.finetune, c.models
    mmt_settings = tuple(f"mmt.{f.name}" for f in dataclasses.fields(params.mmt) if f.name != "targets")
    for target in params.mmt.targets:
        directions = [f"{pivot}-{target}", f"{target}-{pivot}"]
        # the systems params.yaml trains (`mmt.systems`), the MMT's learning curves, MMT against MT when both are there
        trained = trained_systems(params)
        systems = [f"{system}-{direction}" for system in trained for direction in directions]
        compared = [f"mmt-vs-mt-{direction}" for direction in directions] if len(trained) == 2 else []
        curves = [mmt_history(paths, direction) for direction in directions] if "mmt" in trained else []
        measured = [f"{paths.metrics}/mmt/{name}" for name in (*systems, *compared)]
        pipeline.add(
            "train_mmt",
            Stage(
                f"python -m flows.train_mmt {p} --target {target} --prepared {paths.prepared}/{finetune} "
                f"--parallel {paths.prepared}/parallel --store {feature_store(params, finetune)} --models {models} "
                f"--mt_models {paths.mt_models} --metrics {paths.metrics}/mmt --work {paths.work}/train_mmt",
                (
                    f"{paths.prepared}/{finetune}",
                    f"{paths.prepared}/parallel/{parallel_table_name(pivot, target)}",
                    feature_store(params, finetune),
                    *mt_model_folders(params, target, c.root),
                ),
                ("seed", "device", "precision", "distributed", "languages.pivot", *mmt_settings),
                outs=tuple(f"{models}/{name}" for name in systems),
                uncached=(*(f"{path}.notes.json" for path in measured), *curves),
                metrics=tuple(f"{path}.json" for path in measured),
            ),
            key=target,
        )
        if not curves:
            continue
        pipeline.plots.append(
            Plot(
                f"mmt-{pivot}-{target}",
                f"MMT {pivot}→{target} and {target}→{pivot}: validation BLEU (greedy) per training step, "
                "pre-training then fine-tuning",
                "step",
                tuple((curve, ("val_bleu",)) for curve in curves),
                "training step (pre-training, then fine-tuning)",
                "validation BLEU (greedy)",
            )
        )


def trained_systems(params: Params) -> list[str]:
    """The translation systems `train_mmt` writes (`mmt.systems`), in the order of their folders in dvc.yaml."""
    return [system for system in ("mmt", "mt") if system in params.mmt.systems]


def _synthesize(c: _Context, pipeline: Pipeline) -> None:
    """One per target language: the target corpus's captions forward and back."""
    params, paths, pivot, p, target_corpus, models, target_store = (
        c.params,
        c.paths,
        c.pivot,
        c.flag,
        c.target_corpus,
        c.models,
        c.target_store,
    )
    for target in params.mmt.targets:
        pipeline.add(
            "synthesize",
            Stage(
                f"python -m flows.synthesize {p} --target {target} --prepared {paths.prepared}/{target_corpus} "
                f"--store {target_store} --models {models} --work {paths.work}/synthesis "
                f"--out {paths.synthesized}/{target}.parquet --metrics {paths.metrics}/synthesis/{target}.json",
                (
                    f"{paths.prepared}/{target_corpus}",
                    target_store,
                    *(
                        f"{models}/{system}-{direction}"
                        for system in trained_systems(params)
                        for direction in (f"{pivot}-{target}", f"{target}-{pivot}")
                    ),
                ),
                ("device", "precision", "languages.pivot", "mmt.systems", "synthesis"),
                outs=(f"{paths.synthesized}/{target}.parquet",),
                metrics=(f"{paths.metrics}/synthesis/{target}.json",),
            ),
            key=target,
        )


def _augment(c: _Context, pipeline: Pipeline) -> None:
    """The caption variants, one file per language."""
    params, paths, p, target_corpus = c.params, c.paths, c.flag, c.target_corpus
    synthesized = tuple(f"{paths.synthesized}/{target}.parquet" for target in params.mmt.targets)
    pipeline.add(
        "augment",
        Stage(
            f"python -m flows.augment {p} --prepared {paths.prepared}/{target_corpus} "
            f"--synthesized {paths.synthesized} --out {paths.augmented} --metrics {paths.metrics}/augment.json",
            (f"{paths.prepared}/{target_corpus}", *synthesized),
            (
                "mmt.targets",
                "mmt.systems",
                "synthesis.hops",
                "augment",
                "retrieval.variants",
                "retrieval.languages",
                "retrieval.translate_search",
            ),
            outs=(paths.augmented,),
            metrics=(f"{paths.metrics}/augment.json",),
        ),
    )


def _export(c: _Context, pipeline: Pipeline) -> None:
    """The variants as Hugging Face dataset folders."""
    params, paths, p, target_corpus, target_store = c.params, c.paths, c.flag, c.target_corpus, c.target_store
    target_images = params.corpora[target_corpus].images
    pipeline.add(
        "export",
        Stage(
            f"python -m flows.export {p} --augmented {paths.augmented} --prepared {paths.prepared}/{target_corpus} "
            f"--corpus {target_corpus} --synthetic {paths.synthetic} --store {target_store} --out {paths.exports}",
            (
                paths.augmented,
                f"{paths.prepared}/{target_corpus}",
                target_store,
                *((target_images,) if params.export.images else ()),
            ),
            ("languages.pivot", f"corpora.{target_corpus}", "mmt.targets", "augment", "export", "retrieval.variants"),
            outs=(paths.exports,),
        ),
    )


def _translate_queries(c: _Context, pipeline: Pipeline) -> None:
    """Translate-search's test queries, through the mt systems into the pivot."""
    params, paths, pivot, p, target_corpus, models = c.params, c.paths, c.pivot, c.flag, c.target_corpus, c.models
    queries_from = tuple(f"{models}/mt-{lang}-{pivot}" for lang in params.retrieval.translate_search.languages)
    pipeline.add(
        "translate_queries",
        Stage(
            f"python -m flows.translate_queries {p} --prepared {paths.prepared}/{target_corpus} --models {models} "
            f"--out {paths.queries}",
            (f"{paths.prepared}/{target_corpus}", *queries_from),
            ("device", "precision", "languages.pivot", "mmt.beam", "retrieval.translate_search"),
            outs=(paths.queries,),
        ),
    )


def _train_retrieval(c: _Context, pipeline: Pipeline) -> None:
    """One per model x variant x role: its languages' captions, its own settings and the shared ones."""
    params, paths, p, target_store = c.params, c.paths, c.flag, c.target_store
    retrieval = params.retrieval
    shared = _shared_retrieval_settings(retrieval)
    word_vectors = tuple(
        f"{paths.word_vectors}/{retrieval.vocab.fasttext[lang]}"
        for lang in retrieval.languages
        if lang in retrieval.vocab.fasttext
    )
    for model in retrieval.models:
        for variant in retrieval.variants:
            for role in retrieval.roles:
                run = f"{model}-{variant}-{role}"
                captions = tuple(
                    f"{paths.augmented}/{variant}/{caption_variant_file(lang)}"
                    for lang in sorted(retrieval.caption_languages())
                )
                base = retrieval.registry_model(model)
                own = (
                    *((f"retrieval.configs.{base}",) if base in retrieval.configs else ()),
                    *((f"retrieval.aliases.{model}",) if model in retrieval.aliases else ()),
                    *((f"retrieval.custom_roles.{role}",) if role not in PRESETS else ()),
                    *((f"augment.custom_variants.{variant}",) if variant in params.augment.custom_variants else ()),
                )
                pipeline.add(
                    "train_retrieval",
                    Stage(
                        f"python -m flows.train_retrieval {p} --model {model} --variant {variant} --role {role} "
                        f"--augmented {paths.augmented} --store {target_store} --word_vectors {paths.word_vectors} "
                        f"--queries {paths.queries} --out {paths.models}/retrieval/{run} "
                        f"--metrics {paths.metrics}/retrieval/{run}.json --work {paths.work}/train_retrieval",
                        (*captions, target_store, *word_vectors, paths.queries),
                        (
                            "seed",
                            "device",
                            "precision",
                            "distributed.nproc_per_node",
                            "distributed.nnodes",
                            "distributed.rdzv_endpoint",
                            "languages.pivot",
                            *shared,
                            *own,
                        ),
                        outs=(f"{paths.models}/retrieval/{run}", retrieval_ranks(paths, run)),
                        uncached=(f"{paths.metrics}/retrieval/{run}.notes.json", retrieval_history(paths, run)),
                        metrics=(f"{paths.metrics}/retrieval/{run}.json",),
                    ),
                    key=run,
                )
        pipeline.plots.append(_retrieval_plot(c, model))


def _retrieval_plot(c: _Context, model: str) -> Plot:
    """One chart per model: each run's validation rsum per language (its role's test languages) per epoch."""
    retrieval = c.params.retrieval
    curves = []
    for variant in retrieval.variants:
        for role in retrieval.roles:
            languages = retrieval.role(role, c.pivot).test
            run = f"{model}-{variant}-{role}"
            curves.append((retrieval_history(c.paths, run), tuple(f"val_rsum_{lang}" for lang in languages)))
    return Plot(
        f"retrieval-{model}",
        f"{model.upper()}: validation rsum per epoch, of 600 per language (each variant and language)",
        "epoch",
        tuple(curves),
        "epoch",
        "validation rsum of one language (R@1+5+10 both ways, at most 600)",
    )


def mmt_history(paths: Paths, direction: str) -> str:
    """The MMT's learning curve of ``direction`` (``<src>-<tgt>``): validation BLEU per step over both phases."""
    return f"{paths.metrics}/mmt/mmt-{direction}.history.tsv"


def retrieval_history(paths: Paths, run: str) -> str:
    """A retrieval run's learning curve: per seed and epoch, validation rsum in all and per language."""
    return f"{paths.metrics}/retrieval/{run}.history.tsv"


def retrieval_ranks(paths: Paths, run: str) -> str:
    """A retrieval run's per-query test ranks, a row per seed (binary: DVC-cached, not git-tracked)."""
    return f"{paths.metrics}/retrieval/{run}.ranks.npz"


def report_significance(paths: Paths) -> str:
    """The report's paired tests of the retrieval runs."""
    return f"{paths.metrics}/significance.json"


def _report(c: _Context, pipeline: Pipeline) -> None:
    """Every run's metrics gathered, and the paired tests of the runs' per-query ranks."""
    paths, p, target_corpus = c.paths, c.flag, c.target_corpus
    synthesized = tuple(f"{paths.synthesized}/{target}.parquet" for target in c.params.mmt.targets)
    pipeline.add(
        "report",
        Stage(
            f"python -m flows.report {p} --metrics {paths.metrics}/retrieval --synthesized {paths.synthesized} "
            f"--prepared {paths.prepared}/{target_corpus} --corpus {target_corpus} --out {paths.reports} "
            f"--diversity {paths.metrics}/augment.json --round_trips {paths.metrics}/synthesis "
            f"--translation {paths.metrics}/mmt --significance {report_significance(paths)}",
            (
                f"{paths.metrics}/retrieval",
                f"{paths.metrics}/augment.json",
                f"{paths.metrics}/synthesis",
                f"{paths.metrics}/mmt",
                *synthesized,
                f"{paths.prepared}/{target_corpus}",
            ),
            ("augment", "mmt.targets"),
            outs=(paths.reports,),
            metrics=(report_significance(paths),),
        ),
    )


def _shared_retrieval_settings(retrieval: RetrievalConfig) -> tuple[str, ...]:
    """The retrieval settings every run reads: all but the lists of runs and the per-model and per-role entries."""
    per_run = ("models", "variants", "roles", "configs", "aliases", "custom_roles")
    return tuple(f"retrieval.{f.name}" for f in dataclasses.fields(retrieval) if f.name not in per_run)
