"""params.yaml is valid, every bad edit names its key path, and dvc.yaml agrees with the flows."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmtr.dag import build_pipeline
from mmtr.dvc_yaml import stale_dvc_yaml
from mmtr.params import ParamsError, load_params, parse_params
from tests.unit.mmtr.params_text import DUPLICATE_LINE, with_a_duplicate_key

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tree() -> dict[str, Any]:
    return yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


def edited(tree: dict[str, Any], key_path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(tree)
    *parents, last = key_path.split(".")
    node = changed
    for key in parents:
        node = node[key]
    node[last] = value
    return changed


def edited_all(tree: dict[str, Any], edits: dict[str, Any]) -> dict[str, Any]:
    """``tree`` with every ``key path -> value`` of ``edits`` applied, in order."""
    for key_path, value in edits.items():
        tree = edited(tree, key_path, value)
    return tree


def test_repository_params_load() -> None:
    params = load_params(REPO / "params.yaml")
    assert params.languages.all == ("en", "de", "fr", "cs")
    assert params.generate.splits.train == 1000
    assert params.prepare.multi30k.splits["test"].task1 == "test"


def test_edit_is_applied(tree: dict[str, Any]) -> None:
    params = parse_params(edited(tree, "generate.image_size", 128))
    assert params.generate.image_size == 128


@pytest.mark.parametrize(
    ("key_path", "value", "expected"),
    [
        ("generate.image_size", "big", r"generate\.image_size: expected an integer, got 'big'"),
        ("generate.image_size", 16, r"generate\.image_size: got 16, allowed: 64 to 4096"),
        ("precision", "fp8", r"precision: got 'fp8', allowed: fp32, bf16, fp16"),
        ("device", "tpu", r"device: got 'tpu', allowed: auto, cpu, cuda, cuda:<index>"),
        (
            "corpora.synthetic.format",
            "json",
            r"corpora\.synthetic\.format: got 'json', allowed: multi30k, karpathy, scan",
        ),
        ("prepare.read_image_sizes", "yes", r"prepare\.read_image_sizes: expected true or false, got 'yes'"),
        ("languages.targets", ["de", "xx"], r"languages\.targets\[1\]: got 'xx', allowed: an ISO 639-1"),
        ("languages.targets", ["de", "en"], r"languages: a language is listed twice"),
        (
            "generate.objects_per_image",
            {"min": 3, "max": 2},
            r"generate\.objects_per_image\.max: got 2, allowed: 3 to 8",
        ),
        (
            "generate.flickr",
            {"splits": {"train": 0, "val": 5, "test": 5}},
            r"generate\.flickr\.splits\.train: got 0, allowed: at least 1 when val or test > 0",
        ),
        ("prepare.scan.splits", {"train": "train", "dev": "dev"}, r"prepare\.scan\.splits\.dev: unknown split"),
        ("seed", 1.5, r"seed: expected an integer, got 1\.5"),
    ],
)
def test_bad_value_names_key_value_and_allowed(tree: dict[str, Any], key_path: str, value: Any, expected: str) -> None:
    with pytest.raises(ParamsError, match=expected):
        parse_params(edited(tree, key_path, value))


def test_a_top_level_typo_gets_the_key_it_is_close_to(tree: dict[str, Any]) -> None:
    with pytest.raises(
        ParamsError, match=r"^params\.yaml: sede: unknown key; did you mean 'seed'\? allowed keys here: seed,"
    ):
        parse_params({**tree, "sede": 0})
    with pytest.raises(ParamsError, match=r"^params\.yaml: mmt\.pretrian: unknown key; did you mean 'pretrain'\?"):
        parse_params(edited(tree, "mmt.pretrian", {"epochs": 1}))
    with pytest.raises(ParamsError, match=r"^params\.yaml: colour: unknown key; allowed keys here: seed,") as raised:
        parse_params({**tree, "colour": "red"})
    assert "did you mean" not in str(raised.value)  # nothing close: no guess


def test_unknown_key_is_an_error(tree: dict[str, Any]) -> None:
    changed = edited(tree, "prepare.multi30k.tokenised", True)  # British spelling: not a key
    with pytest.raises(ParamsError, match=r"multi30k\.tokenised: unknown key; did you mean 'tokenized'\? allowed keys"):
        parse_params(changed)


def test_missing_key_is_an_error(tree: dict[str, Any]) -> None:
    changed = copy.deepcopy(tree)
    del changed["paths"]["prepared"]
    with pytest.raises(ParamsError, match=r"paths\.prepared: missing key"):
        parse_params(changed)


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match="file not found"):
        load_params(tmp_path / "params.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("seed: [1,\n", encoding="utf-8")
    with pytest.raises(ParamsError, match=rf"{re.escape(str(broken))}: not valid YAML"):
        load_params(broken)
    try:
        load_params(broken)
    except ParamsError as error:
        assert "\n" not in str(error), "one line, whatever YAML's own message looks like"


def test_duplicate_keys_non_utf8_and_a_byte_order_mark(tmp_path: Path) -> None:
    """A key given twice is an error naming its line (PyYAML would keep the last one silently); bytes that are not
    UTF-8 are an error naming their offset; a UTF-8 byte-order mark is not part of the first key."""
    repository = (Path(__file__).resolve().parents[3] / "params.yaml").read_text(encoding="utf-8")
    doubled = tmp_path / "doubled.yaml"
    doubled.write_text(with_a_duplicate_key(repository), encoding="utf-8")
    line = doubled.read_text(encoding="utf-8").splitlines().index(DUPLICATE_LINE) + 1
    with pytest.raises(
        ParamsError,
        match=rf"^{re.escape(str(doubled))}:{line}: duplicate key 'lr_decay_epoch' "
        rf"\(first given on line {line - 1}\); each key once$",
    ):
        load_params(doubled)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"seed: 0\n# caf\xe9\n")
    with pytest.raises(ParamsError, match=rf"^{re.escape(str(latin))}: not UTF-8 \(byte 13: invalid"):
        load_params(latin)
    marked = tmp_path / "marked.yaml"
    marked.write_bytes(b"\xef\xbb\xbf" + repository.encode("utf-8"))
    assert load_params(marked) == load_params(Path(__file__).resolve().parents[3] / "params.yaml")


def test_dvc_stages_run_their_flow_modules_and_use_declared_params(tree: dict[str, Any]) -> None:
    pipeline = build_pipeline(parse_params(tree))
    for group, stages in pipeline.groups.items():
        module = importlib.import_module(f"flows.{group}")
        assert callable(module.main)
        for key, stage in stages.items():
            name = group if key is None else f"{group}@{key}"
            assert stage.cmd.startswith(f"python -m flows.{group} --params params.yaml"), name
            for entry in stage.params:
                node = tree
                for part in entry.split("."):
                    assert part in node, f"stage {name} lists params {entry!r} that params.yaml lacks"
                    node = node[part]


def test_dvc_yaml_is_the_dag_params_yaml_gives() -> None:
    """dvc.yaml is generated (`mmtr dag`); a params edit that changes the DAG must be followed by that command."""
    assert not stale_dvc_yaml(load_params(REPO / "params.yaml"), REPO / "dvc.yaml"), "run `mmtr dag`"


def test_every_configured_retrieval_model_and_variant_resolves(tree: dict[str, Any]) -> None:
    from mmt.augment import VARIANTS
    from retrieval.zoo.registry import MODELS

    params = parse_params(tree)
    assert set(params.retrieval.models) <= set(MODELS)
    assert set(params.retrieval.variants) <= set(VARIANTS)
    for name, config in params.retrieval.configs.items():  # built into each model's own config dataclass
        assert isinstance(config, MODELS[name].config_type)
        assert {key: getattr(config, key) for key in tree["retrieval"]["configs"][name]} == tree["retrieval"][
            "configs"
        ][name]


@pytest.mark.parametrize(
    ("key_path", "value", "expected"),
    [
        ("retrieval.models", ["san", "clip"], r"retrieval\.models\[1\]: unknown name 'clip'; known: san, dan, scan"),
        ("retrieval.variants", ["mmt_x"], r"retrieval\.variants\[0\]: unknown name 'mmt_x'; known: none, mt_f"),
        ("retrieval.configs.san", {"hiden": 4}, r"configs\.san\.hiden: unknown key; did you mean 'hidden'\?"),
        ("retrieval.configs.scan", {"direction": "x2y"}, r"retrieval\.configs\.scan\.direction: got 'x2y'"),
        ("retrieval.configs.san", [1], r"retrieval\.configs\.san: expected a mapping of settings"),
        ("retrieval.configs.clip", {}, r"retrieval\.configs\.clip: unknown model"),
        ("retrieval.languages", ["en", "ja"], r"retrieval\.languages\[1\]: got 'ja', allowed: one of"),
        ("retrieval.objective.kind", "triplet", r"retrieval\.objective\.kind: got 'triplet', allowed: harder"),
        ("retrieval.objective.margin", -0.1, r"retrieval\.objective\.margin: got -0\.1, allowed: 0\.0 to 10\.0"),
        ("retrieval.train.clip", -1, r"retrieval\.train\.clip: got -1\.0, allowed: 0\.0 to"),
        ("retrieval.objective.beta", {"english": 1.0}, r"retrieval\.objective\.beta\.english: expected <lang>-"),
        ("retrieval.train.synthetic_fraction", 1.5, r"retrieval\.train\.synthetic_fraction: got 1\.5"),
        ("retrieval.vocab.fasttext", {"fr": "cc.fr.300.vec"}, r"retrieval\.vocab\.fasttext\.fr: not one of"),
    ],
)
def test_bad_retrieval_values(tree: dict[str, Any], key_path: str, value: Any, expected: str) -> None:
    with pytest.raises(ParamsError, match=expected):
        parse_params(edited(tree, key_path, value))


@pytest.mark.parametrize(
    ("key_path", "value", "expected"),
    [
        ("mmt.pretrain.lr", 0, r"mmt\.pretrain\.lr: got 0\.0, allowed: 0 < lr < 1"),
        ("mmt.finetune.patience", 0, r"mmt\.finetune\.patience: got 0, allowed: 1 to 1000"),
        ("mmt.model.dropout", 1.0, r"mmt\.model\.dropout: got 1\.0, allowed: 0 <= dropout < 1"),
        ("mmt.finetune.visual_lr_scale", 0, r"mmt\.finetune\.visual_lr_scale: got 0\.0, allowed: 0 < visual_lr_scale"),
        ("mmt.model.region_context", "yes", r"mmt\.model\.region_context"),
        ("mmt.model.word_grounding", "yes", r"mmt\.model\.word_grounding"),
        ("mmt.text.vocab_size", 10, r"mmt\.text\.vocab_size: got 10, allowed: 50 to 200000"),
        ("mmt.targets", ["ja"], r"mmt\.targets\[0\]: got 'ja', allowed: one of languages\.targets"),
        ("mmt.targets", [], r"retrieval\.variants\[1\]: mt_f adds synthesized captions; mmt\.targets is empty"),
        ("retrieval.train.lr", float("nan"), r"retrieval\.train\.lr: got nan"),
        ("retrieval.objective.margin", float("inf"), r"retrieval\.objective\.margin: got inf"),
        ("mmt.finetune.clip", float("nan"), r"mmt\.finetune\.clip: got nan"),
        ("mmt.mt_system", "mmt", r"mmt\.mt_system: got 'mmt', allowed: text-only, seq2seq"),
        ("mmt.seq2seq.held", {"english-german": "x"}, r"mmt\.seq2seq\.held\.english-german: got"),
        ("mmt.seq2seq.held", {"en-de": " "}, r"mmt\.seq2seq\.held\.en-de: got ' ', allowed: a folder name or a model"),
        ("mmt.seq2seq.language_codes", {"t5": {"de": "x"}}, r"mmt\.seq2seq\.language_codes\.t5: got 't5', allowed"),
        (
            "mmt.seq2seq.language_codes",
            {"nllb": {"deu": "x"}},
            r"language_codes\.nllb\.deu: got 'deu', allowed: an ISO",
        ),
        ("mmt.seq2seq.finetune", {"lr": 0}, r"mmt\.seq2seq\.finetune\.lr: got 0\.0, allowed: 0 < lr < 1"),
        ("mmt.seq2seq.as_is", "yes", r"mmt\.seq2seq\.as_is"),
        ("features.compact.training", {"lr": 2.0}, r"features\.compact\.training\.lr: got 2\.0, allowed: 0 < lr < 1"),
        ("features.compact.encoder", {"widths": []}, r"features\.compact\.encoder\.widths: at least one stage width"),
        ("features.extractor", "clip", r"features\.extractor: got 'clip', allowed: compact, butd, butd-detectron2, "),
        (
            "features.regions",
            {"mode": "fixed"},
            r"features\.regions\.mode: got 'fixed', allowed with extractor compact",
        ),
        ("features.regions", {"mode": "adaptive", "min_count": 20, "max_count": 10}, r"regions\.max_count: got 10"),
        ("synthesis.kinds", [], r"synthesis\.kinds: at least one kind of caption"),
        ("runner", {"kind": "dask", "max_workers": 1, "address": None}, r"runner\.address: missing: runner kind dask"),
        ("distributed.nproc_per_node", 0, r"distributed\.nproc_per_node: got 0, allowed: 1 to 1024"),
        ("distributed.nnodes", 2, r"distributed\.rdzv_endpoint: missing: nnodes > 1 needs the host:port"),
        ("distributed.rdzv_endpoint", "node01", r"distributed\.rdzv_endpoint: got 'node01', allowed: host:port"),
        (
            "distributed",
            {"nproc_per_node": 4, "nnodes": 2, "rdzv_endpoint": "node01:29500", "parallel_directions": False},
            None,
        ),
        (
            "corpora.synthetic.format",
            "coco",
            r"corpora\.synthetic\.format: got 'coco', allowed: multi30k, karpathy, scan",
        ),
        ("prepare.karpathy.captions_per_image", 0, r"prepare\.karpathy\.captions_per_image: got 0, allowed: 1 to 20"),
        ("retrieval.translate_search.languages", ["de"], None),  # valid: en (the pivot) is in retrieval.languages
    ],
)
def test_every_section_checks_its_own_ranges(tree: dict[str, Any], key_path: str, value: Any, expected: str) -> None:
    if expected is None:
        parse_params(edited(tree, key_path, value))
        return
    with pytest.raises(ParamsError, match=expected):
        parse_params(edited(tree, key_path, value))


def test_seq2seq_settings_reach_their_own_configs(tree: dict[str, Any]) -> None:
    from mmt.config import Seq2SeqFinetuneConfig
    from mmt.marian import MarianTrainConfig

    with pytest.raises(ParamsError, match=r"mmt\.seq2seq\.train\.lr: got 0\.0, allowed: 0 < lr < 1"):
        parse_params(edited(tree, "mmt.seq2seq.train", {**tree["mmt"]["seq2seq"]["train"], "lr": 0}))
    with pytest.raises(ParamsError, match=r"mmt\.seq2seq\.train\.max_len: got 200, allowed: 1 to 127"):
        parse_params(edited(tree, "mmt.seq2seq.train", {**tree["mmt"]["seq2seq"]["train"], "max_len": 200}))
    seq2seq = parse_params(tree).mmt.seq2seq
    assert isinstance(seq2seq.train, MarianTrainConfig) and seq2seq.train.vocab_size == 1000
    assert isinstance(seq2seq.finetune, Seq2SeqFinetuneConfig) and seq2seq.finetune.lr == 0.00005
    assert (seq2seq.held, seq2seq.as_is, seq2seq.language_codes) == ({}, False, {})
    codes = {"nllb": {"de": "deu_Latn"}, "marian-multi": {"fr": "fra"}}
    edited_tree = edited(edited(tree, "mmt.seq2seq.language_codes", codes), "mmt.seq2seq.held", {"en-de": "org/m"})
    parsed = parse_params(edited_tree).mmt.seq2seq
    assert parsed.language_codes == codes and parsed.held == {"en-de": "org/m"}


def _dataclasses_reachable_from(kind: type, seen: set[type]) -> set[type]:
    """Every dataclass type that ``kind``'s field annotations name, recursively (through unions, tuples, dicts)."""

    def visit(annotation: Any) -> None:
        if dataclasses.is_dataclass(annotation) and isinstance(annotation, type) and annotation not in seen:
            seen.add(annotation)
            for hint in typing.get_type_hints(annotation).values():
                visit(hint)
        for argument in typing.get_args(annotation):
            visit(argument)

    visit(kind)
    return seen


def test_each_setting_lives_in_the_dataclass_of_the_component_that_uses_it() -> None:
    """The params reader composes the components' own config dataclasses: the only dataclasses defined in
    mmtr/ are the pipeline's own (Params, paths, corpora and their roles, task runner, torchrun launch); everything
    else is a library config."""
    from mmtr.params import Params

    reachable = _dataclasses_reachable_from(Params, set())
    in_app = {kind.__name__ for kind in reachable if kind.__module__.startswith("mmtr.")}
    assert in_app == {"Params", "Paths", "CorpusParams", "CorpusRoles", "RunnerParams", "DistributedParams"}
    owners = {kind.__module__.split(".")[0] for kind in reachable} - {"mmtr"}
    assert owners <= {"common", "corpora", "features", "mmt", "retrieval"}
    assert {
        "SyntheticConfig",
        "FeaturesConfig",
        "SystemsConfig",
        "TrainConfig",
        "RetrievalConfig",
        "RankingLoss",
        "MarianTrainConfig",
        "Seq2SeqFinetuneConfig",
        "MMTConfig",
        "CompactTraining",
    } <= {kind.__name__ for kind in reachable}


def test_every_library_config_with_defaults_is_valid_as_it_stands() -> None:
    """A config built from its defaults (in code, or for keys a params file leaves out) passes its own checks."""
    from mmtr.params import Params
    from retrieval.zoo.registry import MODELS

    configs = _dataclasses_reachable_from(Params, set()) | {entry.config_type for entry in MODELS.values()}

    def has_defaults(field: dataclasses.Field[Any]) -> bool:
        return field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING

    defaulted = [kind for kind in configs if all(map(has_defaults, dataclasses.fields(kind)))]
    assert len(defaulted) >= 25
    for kind in defaulted:
        kind()


def test_params_sections_are_library_configs(tree: dict[str, Any]) -> None:
    from mmt.train import TrainConfig as MMTTrainConfig
    from retrieval.train import TrainConfig as RetrievalTrainConfig

    params = parse_params(tree)
    assert (
        type(params.mmt.pretrain) is MMTTrainConfig and params.mmt.pretrain.epochs == tree["mmt"]["pretrain"]["epochs"]
    )
    assert type(params.retrieval.train) is RetrievalTrainConfig
    assert params.retrieval.train.clip == tree["retrieval"]["train"]["clip"]


def test_check_params_lists_the_retrieval_runs_and_their_roles(
    tree: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmtr import cli

    edited_tree = edited(edited(tree, "retrieval.roles", ["all", "pivot_only"]), "retrieval.models", ["san"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(edited_tree))
    cli.main(["check-params", "--params", str(tmp_path / "params.yaml")])
    out = capsys.readouterr().out
    assert "retrieval: 6 runs = models san x variants none, mt_f, mmt_f x roles all, pivot_only" in out
    assert "    all: trains on en, de; tested on en, de\n" in out
    assert "    pivot_only: trains on en; tested on en\n" in out


def test_a_role_beyond_the_retrieval_languages_is_a_params_error(tree: dict[str, Any]) -> None:
    """`pivot` is en, which the runs do not draw on; with [en] alone, `all` is simply English."""
    with pytest.raises(ParamsError, match=r"^params\.yaml: retrieval\.roles\.all: reaches 'en', not one of "):
        parse_params(edited(tree, "retrieval.languages", ["de"]))
    english = parse_params(edited(tree, "retrieval.languages", ["en"])).retrieval
    assert english.role("all", "en").train == (("en", None),)


@pytest.mark.parametrize(
    ("key_path", "value", "expected"),
    [
        (
            "corpus_roles.target",
            "flickr",
            r"corpus_roles\.target: got 'flickr', allowed: a name of corpora: synthetic$",
        ),
        ("corpus_roles.mmt_finetune", "m30k", r"corpus_roles\.mmt_finetune: got 'm30k', allowed: a name of corpora"),
        ("corpora", {}, r"corpora: at least one corpus is needed$"),
        ("corpora.synthetic.images", None, r"corpora\.synthetic\.images: expected a string, got None$"),
    ],
)
def test_corpora_and_their_roles_are_checked(tree: dict[str, Any], key_path: str, value: Any, expected: str) -> None:
    with pytest.raises(ParamsError, match=expected):
        parse_params(edited(tree, key_path, value))


def test_corpus_names_are_stage_and_folder_names(tree: dict[str, Any]) -> None:
    for name in ("Flickr", "coco-2014", "parallel"):
        changed = copy.deepcopy(tree)
        changed["corpora"][name] = changed["corpora"]["synthetic"]
        with pytest.raises(ParamsError, match=rf"corpora\.{name}: got '{name}', allowed: lowercase letters"):
            parse_params(changed)


def test_two_corpora_with_separate_roles(tree: dict[str, Any]) -> None:
    """The paper's setup: the MMT learns on one corpus, the other is augmented and retrieved on."""
    changed = copy.deepcopy(tree)
    changed["corpora"]["flickr"] = {
        "format": "karpathy",
        "dataset": "flickr30k",
        "source": "f/dataset.json",
        "images": "f/images",
        "boxes": "f/objects.parquet",
    }
    changed["corpus_roles"]["target"] = "flickr"
    params = parse_params(changed)
    assert params.corpus(params.corpus_roles.target).format == "karpathy"
    assert params.corpus(params.corpus_roles.mmt_finetune).format == "multi30k"


@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        (
            {"retrieval.variants": ["none", "mmt_fbf"]},
            r"retrieval\.variants\[1\]: mmt_fbf needs 3 hops; synthesis\.hops is 2$",
        ),
        (
            {"synthesis.hops": 1, "retrieval.variants": ["none", "mmt_f", "mmt_fb"]},
            r"retrieval\.variants\[2\]: mmt_fb needs 2 hops; synthesis\.hops is 1$",  # hop 1 is made, not kept
        ),
        (
            {"synthesis.hops": 3, "retrieval.variants": ["none", "mmt_fbfb"]},
            r"retrieval\.variants\[1\]: mmt_fbfb needs 4 hops; synthesis\.hops is 3$",
        ),
        (
            {"retrieval.variants": ["none", "mmt_b"]},
            r"retrieval\.variants\[1\]: mmt_b is retired: the back-translated pivot captions alone \(hop 2\) are "
            r"now mmt_fb, MMT\(f\+b\) as the paper defines it; hops 1 and 2 together are mmt_f_fb$",
        ),
        (
            {"synthesis.hops": 1, "retrieval.variants": ["mt_fb"]},
            r"retrieval\.variants\[0\]: mt_fb needs 2 hops; synthesis\.hops is 1$",
        ),
        ({"synthesis.hops": 9}, r"synthesis\.hops: got 9, allowed: 1 to 8$"),
        (
            {"augment.custom_variants": {"deep": {"origin": "mt", "hops": 4}}, "retrieval.variants": ["none", "deep"]},
            r"retrieval\.variants\[1\]: deep needs 4 hops; synthesis\.hops is 2$",
        ),
        (
            {"retrieval.variants": ["none", "mmt_x"]},
            r"retrieval\.variants\[1\]: unknown name 'mmt_x'; known: none, mt_f, ",
        ),
        (
            {"augment.custom_variants": {"mmt-b": {"origin": "mmt", "hops": 2, "keep": [2]}}},
            r"augment\.custom_variants\.mmt-b: got 'mmt-b', allowed: lowercase letters, digits and _",
        ),
        (
            {"augment.custom_variants": {"mmt_fb": {"origin": "mmt", "hops": 2}}},
            r"augment\.custom_variants\.mmt_fb: a preset has this name; presets: none, mt_f",
        ),
        (
            {"augment.custom_variants": {"para": {"origin": "mmt", "hops": 2, "keep": [3]}}},
            r"augment\.custom_variants\.para\.keep\[0\]: got 3, allowed: a hop from 1 to 2$",
        ),
        (
            {"augment.custom_variants": {"para": {"origin": "nmt", "hops": 2}}},
            r"augment\.custom_variants\.para\.origin: got 'nmt', allowed: mt, mmt",
        ),
        (
            {"augment.custom_variants": {"para": {"hops": 2}}},
            r"augment\.custom_variants\.para\.origin: missing: hops 2 need a system",
        ),
    ],
)
def test_variants_are_known_and_within_the_synthesized_hops(
    tree: dict[str, Any], edits: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ParamsError, match=expected):
        parse_params(edited_all(tree, edits))


def test_variants_of_more_hops_and_of_your_own(tree: dict[str, Any]) -> None:
    from mmt.augment import VARIANTS, Variant

    changed = edited(tree, "synthesis.hops", 3)
    changed = edited(changed, "augment.custom_variants", {"paraphrases": {"origin": "mmt", "hops": 3, "keep": [2]}})
    params = parse_params(edited(changed, "retrieval.variants", ["none", "paraphrases", "mmt_fbf"]))
    assert params.synthesis.hops == 3 and params.retrieval.variants == ("none", "paraphrases", "mmt_fbf")
    assert params.augment.variants == {**VARIANTS, "paraphrases": Variant("mmt", hops=3, keep=(2,))}
    assert parse_params(tree).synthesis.hops == 2 and parse_params(tree).augment.custom_variants == {}


def test_stages_that_read_the_variants_list_the_params_they_come_from() -> None:
    """augment builds the variants of retrieval.variants (presets or augment.custom_variants) and report labels
    them: DVC reruns them when those params change."""
    stages = build_pipeline(load_params(REPO / "params.yaml")).groups
    assert {"augment", "retrieval.variants"} <= set(stages["augment"][None].params)
    assert "augment" in stages["report"][None].params
    assert all("synthesis" in stage.params for stage in stages["synthesize"].values())  # synthesis.hops: its passes


@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        ({"mmt.systems": ["mt", "nmt"]}, r"mmt\.systems\[1\]: got 'nmt', allowed: mmt, mt$"),
        ({"mmt.systems": []}, r"mmt\.systems: at least one system is needed$"),
        ({"mmt.systems": ["mt", "mt"]}, r"mmt\.systems: got \['mt', 'mt'\], allowed: each system once$"),
        (
            {"mmt.systems": ["mt"]},
            r"retrieval\.variants\[2\]: mmt_f needs the mmt system; mmt\.systems is \['mt'\]$",
        ),
        (
            {"mmt.systems": ["mmt"], "retrieval.variants": ["none", "mmt_f"]},
            r"retrieval\.translate_search\.languages: translate-search translates with the mt system",
        ),
    ],
)
def test_systems_are_checked_against_the_variants_and_translate_search(
    tree: dict[str, Any], edits: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ParamsError, match=expected):
        parse_params(edited_all(tree, edits))


def test_the_text_only_route_needs_no_mmt(tree: dict[str, Any]) -> None:
    changed = edited(edited(tree, "mmt.systems", ["mt"]), "retrieval.variants", ["none", "mt_f", "mt_fb"])
    assert parse_params(changed).mmt.systems == ("mt",)


def test_params_yaml_is_in_the_form_dvc_writes() -> None:
    """DVC's YAML writer (ruamel with DVC's settings) leaves params.yaml as it is, and an edited key changes one
    line. (`dvc exp run -S` goes through Hydra's overrides instead: the next test.)"""
    from dvc.utils.serialize._yaml import dumps_yaml, parse_yaml_for_update

    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    assert dumps_yaml(parse_yaml_for_update(text, "params.yaml")) == text
    tree = parse_yaml_for_update(text, "params.yaml")
    epochs = tree["retrieval"]["train"]["epochs"]
    tree["retrieval"]["train"]["epochs"] = epochs + 3
    changed = [
        pair for pair in zip(text.splitlines(), dumps_yaml(tree).splitlines(), strict=True) if pair[0] != pair[1]
    ]
    assert changed == [(f"    epochs: {epochs}", f"    epochs: {epochs + 3}")]


def test_set_param_keeps_every_other_value_and_every_comment(tmp_path: Path) -> None:
    """`dvc exp run -S key=value` writes params.yaml through Hydra's override grammar (``apply_overrides``, what DVC
    runs for every ``-S``): the key changes, every other value and every comment stays, only the lists' layout
    changes (block style), which `dvc params diff` and `dvc exp show` do not see."""
    from dvc.utils.hydra import apply_overrides

    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    path = tmp_path / "params.yaml"
    path.write_text(text, encoding="utf-8")
    apply_overrides(str(path), ["retrieval.train.epochs=24"])
    after = path.read_text(encoding="utf-8")
    expected = yaml.safe_load(text)
    expected["retrieval"]["train"]["epochs"] = 24
    assert yaml.safe_load(after) == expected

    def comments(yaml_text: str) -> list[str]:
        return sorted(match.group(0).strip() for match in re.finditer(r"#.*", yaml_text))

    assert comments(after) == comments(text)
