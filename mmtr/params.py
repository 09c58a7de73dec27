"""The only reader of ``params.yaml``: loads it once into frozen, typed configuration.

Every knob of the pipeline lives in ``params.yaml``, and every setting is declared once: in the config
dataclass of the component that uses it (``SyntheticConfig``, ``FeaturesConfig``, ``SystemsConfig``,
``RetrievalConfig``, ...), with its range check beside it. :class:`Params` composes those dataclasses, adds
the pipeline's own settings (paths, task runner) and checks what spans sections. A bad file fails at load
time, naming the key path, the bad value and what is allowed. Library code never sees the raw tree: flows
pass it the typed pieces it needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml

from common.checks import SettingError, check, check_not_empty, check_range
from common.config import build
from common.errors import InputError
from common.runtime import Precision, check_device
from corpora.adapters import ADAPTERS
from corpora.config import ExportConfig, PrepareConfig
from corpora.languages import Languages
from corpora.synthetic.config import SyntheticConfig
from corpora.synthetic.grammars import GRAMMARS
from features.config import FeaturesConfig
from mmt.augment import RETIRED
from mmt.config import AugmentConfig, SynthesisConfig, SystemsConfig
from mmtr.errors import ParamsError
from retrieval.config import RetrievalConfig


@dataclass(frozen=True)
class Paths:
    synthetic: str  # where the `generate` stage writes the built-in dataset
    parallel: str  # text-only parallel corpus folder (MMT pre-training): <pivot>-<target>/<split>.<lang>[.gz|.sgm]
    prepared: str  # canonical tables: <prepared>/<corpus>/ per corpus, <prepared>/parallel/ for the text-only one
    feature_inputs: str  # what you hold for `features`: detector checkpoints, SCAN *_ims.npy, bottom-up TSV files
    features: str  # FeatureStores, one folder per corpus and extractor: <features>/<corpus>/<extractor>/
    work: str  # resumable intermediate work (finished shards of an interrupted run); not versioned
    metrics: str  # metrics files, one folder per family
    models: str  # trained models: <models>/mmt/<system>-<src>-<tgt>/
    mt_models: str  # MT model folders you hold (e.g. opus-mt-en-de downloaded elsewhere), named in mmt.seq2seq.held
    synthesized: str  # synthesized captions per target language: <synthesized>/<tgt>.parquet
    augmented: str  # caption variants: <augmented>/<variant>/captions.parquet
    queries: str  # translate-search's test queries translated into the pivot: <queries>/<lang>-<pivot>.parquet
    exports: str  # caption variants as Hugging Face dataset folders: <exports>/<variant>/
    word_vectors: str  # FastText .vec files you hold for retrieval.vocab.fasttext
    reports: str  # results.md and index.html


CORPUS_NAME = re.compile(r"[a-z][a-z0-9_]*")
RESERVED_CORPUS_NAMES = ("parallel",)  # <prepared>/parallel holds the text-only corpus


@dataclass(frozen=True)
class CorpusParams:
    """One image-caption corpus of the experiment (an entry of `corpora`), prepared once into
    ``<paths.prepared>/<name>/`` and featurized into ``<paths.features>/<name>/<extractor>/``."""

    format: str  # the adapter that reads it: multi30k | karpathy | scan | hf (its settings: prepare.<format>)
    dataset: str  # name written to images.parquet's `dataset` column
    source: str  # a Multi30K-layout folder, a Karpathy JSON file, a SCAN folder or a Hugging Face dataset
    images: str  # the image folder; images.parquet paths are relative to it
    boxes: str  # given boxes per image (+ object/attribute labels), read when features.regions.mode is given
    # the FeatureStore's name, <paths.features>/<image_set>/<extractor>/: corpora over one image folder share one
    # (Multi30K and Flickr30K: one extraction); default: the name of the first corpus over the folder
    image_set: str | None = None

    def __post_init__(self) -> None:
        check(self.format in ADAPTERS, "format", self.format, ", ".join(ADAPTERS))
        if self.image_set is not None:
            allowed = "lowercase letters, digits and _"
            check(CORPUS_NAME.fullmatch(self.image_set) is not None, "image_set", self.image_set, allowed)


@dataclass(frozen=True)
class CorpusRoles:
    """Which corpus each part of the method uses (Huang et al. 2020 section 4.2: the MMT learns on Multi30K,
    then augments Flickr30K or MS-COCO). The MMT is pre-trained on the text-only corpus at `paths.parallel`."""

    mmt_finetune: str  # whose translation captions (with images) fine-tune the MMT and the text-only MT system
    target: str  # whose pivot captions are synthesized, and whose splits retrieval trains, validates and tests on


@dataclass(frozen=True)
class RunnerParams:
    """Where shards of heavy steps run (mmtr/stage.py builds the Prefect task runner)."""

    kind: Literal["local", "dask"]
    max_workers: int  # local: threads mapping shards (1 = one after the other; torch uses every core anyway)
    address: str | None  # dask: scheduler address of an existing cluster, e.g. tcp://10.0.0.5:8786

    def __post_init__(self) -> None:
        check_range("max_workers", self.max_workers, 1, 256)
        if self.kind == "dask" and not self.address:
            raise SettingError("address", "missing: runner kind dask needs a scheduler address (tcp://host:8786)")


@dataclass(frozen=True)
class DistributedParams:
    """Data-parallel training of `train_mmt` and `train_retrieval` under torchrun (common/distributed.py): the
    stage command starts torchrun itself when more than one process is asked for."""

    nproc_per_node: int  # processes on this machine: one per GPU (NCCL), or CPU processes (Gloo); 1 = no torchrun
    nnodes: int  # machines; > 1: run the same stage command on every one (docs/scaling.md: several machines)
    rdzv_endpoint: str | None  # nnodes > 1: host:port every node reaches (torchrun's c10d rendezvous)
    # train_mmt: a pair's two directions at once, in two processes with half the CPU threads each (one process
    # under torchrun: its ranks train one direction after the other)
    parallel_directions: bool

    def __post_init__(self) -> None:
        check_range("nproc_per_node", self.nproc_per_node, 1, 1024)
        check_range("nnodes", self.nnodes, 1, 100_000)
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise SettingError("rdzv_endpoint", "missing: nnodes > 1 needs the host:port of the rendezvous")
        if self.rdzv_endpoint is not None:
            check(
                re.fullmatch(r"[^\s:]+:\d{1,5}", self.rdzv_endpoint) is not None,
                "rdzv_endpoint",
                self.rdzv_endpoint,
                "host:port",
            )

    @property
    def processes(self) -> int:
        """Processes in all (the world size)."""
        return self.nproc_per_node * self.nnodes


@dataclass(frozen=True)
class Params:
    seed: int
    device: str  # auto | cpu | cuda | cuda:<index>
    precision: Precision
    languages: Languages
    paths: Paths
    corpora: dict[str, CorpusParams]
    corpus_roles: CorpusRoles
    runner: RunnerParams
    distributed: DistributedParams
    generate: SyntheticConfig
    prepare: PrepareConfig
    features: FeaturesConfig
    mmt: SystemsConfig
    synthesis: SynthesisConfig
    augment: AugmentConfig
    export: ExportConfig
    retrieval: RetrievalConfig

    def corpus(self, name: str) -> CorpusParams:
        """The corpus ``name`` of `corpora`; an InputError lists the configured ones."""
        if name not in self.corpora:
            raise InputError(f"unknown corpus {name!r}; params.yaml corpora: {', '.join(self.corpora)}")
        return self.corpora[name]

    def builtin_world_in_use(self) -> bool:
        """Whether the built-in world is read: a corpus or the parallel text lies in ``paths.synthetic`` (then the
        DAG has a `generate` stage, and every language needs a built-in grammar)."""
        synthetic = PurePosixPath(self.paths.synthetic)

        def inside(path: str) -> bool:
            return PurePosixPath(path) == synthetic or synthetic in PurePosixPath(path).parents

        return inside(self.paths.parallel) or any(inside(corpus.source) for corpus in self.corpora.values())

    def __post_init__(self) -> None:
        check(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        check_device("device", self.device)
        check_not_empty("corpora", self.corpora, "corpus")
        for name in self.corpora:
            check(
                CORPUS_NAME.fullmatch(name) is not None and name not in RESERVED_CORPUS_NAMES,
                f"corpora.{name}",
                name,
                "lowercase letters, digits and _, not " + ", ".join(RESERVED_CORPUS_NAMES),
            )
        for role in ("mmt_finetune", "target"):
            name = getattr(self.corpus_roles, role)
            check(name in self.corpora, f"corpus_roles.{role}", name, f"a name of corpora: {', '.join(self.corpora)}")
        languages = self.languages
        if self.builtin_world_in_use():
            for index, code in enumerate(languages.targets):
                if code not in GRAMMARS:
                    raise SettingError(
                        f"languages.targets[{index}]",
                        f"the built-in world ({self.paths.synthetic}) has no grammar for {code!r}: write "
                        f"corpora/synthetic/grammars/{code}.py (as de.py) and add it to GRAMMARS, or read real corpora",
                    )
        for index, target in enumerate(self.mmt.targets):
            allowed = f"one of languages.targets {list(languages.targets)}"
            check(target in languages.targets, f"mmt.targets[{index}]", target, allowed)
        retrieval = self.retrieval
        variants = self.augment.variants
        for index, name in enumerate(retrieval.variants):
            key = f"retrieval.variants[{index}]"
            if name not in variants:
                raise SettingError(key, RETIRED.get(name, f"unknown name {name!r}; known: {', '.join(variants)}"))
            origin = variants[name].origin
            if origin is not None and not self.mmt.targets:  # no target language: nothing is synthesized
                raise SettingError(
                    key,
                    f"{name} adds synthesized captions; mmt.targets is empty (name a target "
                    f"language, or keep only the variant none)",
                )
            if origin is not None and origin not in self.mmt.systems:  # `synthesize` would not run that system
                raise SettingError(key, f"{name} needs the {origin} system; mmt.systems is {list(self.mmt.systems)}")
            if variants[name].hops > self.synthesis.hops:  # `augment` would find no captions of the later hops
                raise SettingError(
                    key, f"{name} needs {variants[name].hops} hops; synthesis.hops is {self.synthesis.hops}"
                )
            if variants[name].to_pivot and not self.synthesis.to_pivot:  # `synthesize` would not translate them
                raise SettingError(
                    key, f"{name} adds the targets' captions translated into the pivot; set synthesis.to_pivot"
                )
        for index, name in enumerate(self.export.variants):  # `augment` writes only these
            check(
                name in retrieval.variants,
                f"export.variants[{index}]",
                name,
                f"one of retrieval.variants {list(retrieval.variants)}",
            )
        for key, codes in (
            ("retrieval.languages", retrieval.languages),
            ("retrieval.translate_search.languages", retrieval.translate_search.languages),
        ):
            for index, code in enumerate(codes):
                check(code in languages.all, f"{key}[{index}]", code, f"one of {list(languages.all)}")
        for name in retrieval.roles:
            try:
                retrieval.role(name, languages.pivot)
            except SettingError as error:
                raise SettingError(f"retrieval.{error.key}", error.message) from None
        if retrieval.translate_search.languages and "mt" not in self.mmt.systems:
            message = f"translate-search translates with the mt system; mmt.systems is {list(self.mmt.systems)}"
            raise SettingError("retrieval.translate_search.languages", message)
        if retrieval.translate_search.languages and languages.pivot not in retrieval.languages:
            message = f"translate-search queries the pivot ({languages.pivot}); add it to retrieval.languages"
            raise SettingError("retrieval.translate_search.languages", message)


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read, type-check and validate ``params.yaml``.

    Raises:
        ParamsError: naming the file, the key path, the bad value and what is allowed.
    """
    source = Path(path)
    if not source.is_file():
        raise ParamsError(f"{source}: file not found")
    try:
        text = source.read_bytes().decode("utf-8-sig")  # a byte-order mark is not part of the first key
    except UnicodeDecodeError as error:
        raise ParamsError(f"{source}: not UTF-8 (byte {error.start}: {error.reason})") from None
    try:
        tree = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader that rejects duplicate keys
    except _DuplicateKey as error:
        raise ParamsError(f"{source}:{error.line}: {error}") from None
    except yaml.YAMLError as error:
        raise ParamsError(f"{source}: not valid YAML: {' '.join(str(error).split())}") from None
    return parse_params(tree, source=str(source))


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, line: int, first: int) -> None:
        super().__init__(f"duplicate key {key!r} (first given on line {first}); each key once")
        self.line = line


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            if key in seen:
                raise _DuplicateKey(key, line, seen[key])
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def parse_params(tree: Any, *, source: str = "params.yaml") -> Params:
    """Build :class:`Params` from an already-parsed YAML tree (tests use this directly)."""
    try:
        return build(Params, tree)
    except SettingError as error:
        raise ParamsError(f"{source}: {error.key or '<top level>'}: {error.message}") from None
