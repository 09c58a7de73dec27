"""Hostile input at every entry point: each ends in one line, ``<program>: error: <culprit>: <what is wrong>``,
and exit status 2, never a traceback; ``--debug`` shows the traceback of the same error.

The stage entry points are called in-process with the arguments DVC gives them (resolved from dvc.yaml), their
params file swapped for a hostile one; the ``mmtr`` commands with hostile arguments and files. Cases that need
trained models or data live beside their flows (tests/flows), these need neither.
"""

from __future__ import annotations

import copy
import importlib
import io
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmtr import cli
from tests.command_line import flags
from tests.unit.mmtr.params_text import with_a_duplicate_key

REPO = Path(__file__).resolve().parents[3]
BASE: dict[str, Any] = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


def _stage_commands() -> dict[str, list[str]]:
    """Stage name -> its argv (after ``python -m flows.<stage>``), one per flow module, as DVC resolves them."""
    from dvc.repo import Repo

    commands: dict[str, list[str]] = {}
    with Repo(str(REPO)) as repo:
        for stage in repo.index.stages:
            _, _, module, *args = shlex.split(stage.cmd)
            commands.setdefault(module, args)
    return commands


STAGES = _stage_commands()


def edited(edits: dict[str, Any]) -> dict[str, Any]:
    tree = copy.deepcopy(BASE)
    for key_path, value in edits.items():
        *parents, leaf = key_path.split(".")
        node = tree
        for key in parents:
            node = node[key]
        node[leaf] = value
    return tree


def hostile_params(folder: Path, edits: dict[str, Any]) -> Path:
    """The repository's params with ``edits`` applied, written to ``folder/params.yaml``."""
    params = folder / "params.yaml"
    params.write_text(yaml.safe_dump(edited(edits)), encoding="utf-8")
    return params


def run_stage(module: str, params: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    argv = list(STAGES[module])
    argv[argv.index("--params") + 1] = str(params)
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(module).main([*argv, *extra])
    return int(stopped.value.code or 0), capsys.readouterr().err


def one_line_error(err: str, program: str, culprit: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    assert lines[0].startswith(f"{program}: error: "), lines[0]
    assert re.search(culprit, lines[0]), f"{culprit!r} not named in: {lines[0]}"
    assert "Traceback" not in err


# params.yaml edits -> the key path (or file:line) the message must name
PARAMS_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("negative seed", {"seed": -1}, r"seed: got -1"),
    ("device", {"device": "tpu"}, r"device: "),
    ("precision", {"precision": "fp8"}, r"precision: "),
    ("unknown top-level key", {"sede": 0}, r"sede: unknown key"),
    ("pivot not a code", {"languages.pivot": "english"}, r"languages\.pivot"),
    ("image size", {"generate.image_size": 8}, r"generate\.image_size: got 8"),
    ("NaN share", {"generate.underspecified": float("nan")}, r"generate\.underspecified: got nan"),
    ("noise above 1", {"generate.noise.typo": 1.5}, r"generate\.noise\.typo: got 1\.5"),
    ("empty corpora", {"corpora": {}}, r"corpora: "),
    ("unknown corpus format", {"corpora.synthetic.format": "coco"}, r"corpora\.synthetic\.format: got 'coco'"),
    ("role names no corpus", {"corpus_roles.target": "flickr"}, r"corpus_roles\.target: got 'flickr'"),
    ("unknown extractor", {"features.extractor": "clip"}, r"features\.extractor: got 'clip'"),
    ("shard size 0", {"features.shard_size": 0}, r"features\.shard_size: got 0"),
    ("compact lr NaN", {"features.compact.training.lr": float("nan")}, r"features\.compact\.training\.lr: got nan"),
    ("empty mmt targets", {"mmt.targets": []}, r"mmt\.targets is empty"),
    ("target not a language", {"mmt.targets": ["ja"]}, r"mmt\.targets\[0\]: got 'ja'"),
    ("pretrain lr inf", {"mmt.pretrain.lr": float("inf")}, r"mmt\.pretrain\.lr: got inf"),
    ("finetune clip NaN", {"mmt.finetune.clip": float("nan")}, r"mmt\.finetune\.clip: got nan"),
    ("dropout 1", {"mmt.model.dropout": 1.0}, r"mmt\.model\.dropout: got 1\.0"),
    ("beam 0", {"mmt.beam": 0}, r"mmt\.beam: got 0"),
    ("unknown system", {"mmt.systems": ["mmt", "gpt"]}, r"mmt\.systems\[1\]: got 'gpt'"),
    ("marian lr", {"mmt.seq2seq.train.lr": -1}, r"mmt\.seq2seq\.train\.lr"),
    ("fine-tuning lr", {"mmt.seq2seq.finetune.lr": -1}, r"mmt\.seq2seq\.finetune\.lr"),
    ("synthesis hops 0", {"synthesis.hops": 0}, r"synthesis\.hops: got 0"),
    ("variant needs more hops", {"synthesis.hops": 1, "retrieval.variants": ["none", "mmt_fb"]}, r"mmt_fb needs 2"),
    ("unknown model", {"retrieval.models": ["san", "clip"]}, r"retrieval\.models\[1\]: unknown name 'clip'"),
    ("unknown variant", {"retrieval.variants": ["none", "mmt_x"]}, r"retrieval\.variants\[1\]: unknown name"),
    ("unknown role", {"retrieval.roles": ["everything"]}, r"retrieval\.roles\[0\]: unknown role 'everything'"),
    ("margin NaN", {"retrieval.objective.margin": float("nan")}, r"retrieval\.objective\.margin: got nan"),
    ("margin negative", {"retrieval.objective.margin": -0.2}, r"retrieval\.objective\.margin: got -0\.2"),
    ("clip negative", {"retrieval.train.clip": -1}, r"retrieval\.train\.clip: got -1"),
    ("lr NaN", {"retrieval.train.lr": float("nan")}, r"retrieval\.train\.lr: got nan"),
    ("batch 0", {"retrieval.train.batch_size": 0}, r"retrieval\.train\.batch_size: got 0"),
    ("replicates 0", {"retrieval.replicates": 0}, r"retrieval\.replicates: got 0"),
    ("model config key", {"retrieval.configs.san": {"hiden": 3}}, r"retrieval\.configs\.san\.hiden: unknown key"),
    ("model config value", {"retrieval.configs.san": {"hidden": -3}}, r"retrieval\.configs\.san\.hidden: got -3"),
    ("protocol", {"retrieval.evaluation.protocol": "all"}, r"retrieval\.evaluation\.protocol: got 'all'"),
    ("runner kind", {"runner.kind": "spark"}, r"runner\.kind: got 'spark'"),
    ("string for a number", {"retrieval.train.epochs": "six"}, r"retrieval\.train\.epochs"),
]


@pytest.mark.parametrize(("name", "edits", "culprit"), PARAMS_CASES, ids=[case[0] for case in PARAMS_CASES])
def test_check_params_names_the_bad_key(
    name: str, edits: dict[str, Any], culprit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = hostile_params(tmp_path, edits)
    with pytest.raises(SystemExit) as stopped:
        cli.main(["check-params", "--params", str(params)])
    assert stopped.value.code == 2
    one_line_error(capsys.readouterr().err, "mmtr", rf"{re.escape(str(params))}: .*{culprit}")


STAGE_CASES = [  # every stage rejects a params file that check-params rejects, before any work
    ("flows.generate", {"generate.image_size": 8}, r"generate\.image_size"),
    ("flows.prepare", {"prepare.multi30k.tasks": ["task3"]}, r"prepare\.multi30k\.tasks"),
    ("flows.prepare_parallel", {"languages.targets": []}, r"languages\.targets"),
    ("flows.features", {"features.batch_size": 0}, r"features\.batch_size: got 0"),
    ("flows.train_mmt", {"mmt.finetune.lr": float("nan")}, r"mmt\.finetune\.lr: got nan"),
    ("flows.synthesize", {"synthesis.beam": -2}, r"synthesis\.beam: got -2"),
    ("flows.augment", {"mmt.targets": []}, r"mmt\.targets is empty"),
    ("flows.train_retrieval", {"retrieval.objective.margin": float("inf")}, r"margin: got inf"),
    ("flows.report", {"retrieval.variants": []}, r"retrieval\.variants"),
]


@pytest.mark.parametrize(("module", "edits", "culprit"), STAGE_CASES, ids=[case[0] for case in STAGE_CASES])
def test_every_stage_rejects_bad_params_in_one_line(
    module: str, edits: dict[str, Any], culprit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_stage(module, hostile_params(tmp_path, edits), capsys)
    assert code == 2
    one_line_error(err, f"python -m {module}", culprit)


RAW_PARAMS = [  # bytes of the params file -> what the message names
    ("duplicate key", None, r":\d+: duplicate key 'lr_decay_epoch' \(first given on line \d+\)"),
    ("not UTF-8", b"seed: 0\n# caf\xe9\n", r"not UTF-8 \(byte 13"),
    ("not YAML", b"seed: [0,\n", r"not valid YAML"),
    ("not a mapping", b"- seed\n- 0\n", r"<top level>|expected a mapping"),
    ("empty file", b"", r"<top level>|expected a mapping"),
    ("missing file", "missing", r"file not found"),
]


@pytest.mark.parametrize(("name", "content", "culprit"), RAW_PARAMS, ids=[case[0] for case in RAW_PARAMS])
@pytest.mark.parametrize("module", ["flows.train_mmt", "flows.features", "mmtr"])
def test_unreadable_params_files(
    name: str,
    content: bytes | str | None,
    culprit: str,
    module: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    params = tmp_path / "params.yaml"
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    if content is None:
        params.write_text(with_a_duplicate_key(text), encoding="utf-8")
    elif isinstance(content, bytes):
        params.write_bytes(content)
    if module == "mmtr":
        with pytest.raises(SystemExit) as stopped:
            cli.main(["check-params", "--params", str(params)])
        code, err, program = int(stopped.value.code or 0), capsys.readouterr().err, "mmtr"
    else:
        code, err = run_stage(module, params, capsys)
        program = f"python -m {module}"
    assert code == 2
    one_line_error(err, program, rf"{re.escape(str(params))}.*(?:{culprit})")


def _cli(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    stdin: bytes | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str]:
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    return int(stopped.value.code or 0), capsys.readouterr().err


def _regional_folder(root: Path) -> Path:
    """A folder that says it holds a multimodal en->de system (what translate checks before loading weights)."""
    folder = root / "mmt-en-de"
    folder.mkdir(parents=True)
    (folder / "system.json").write_text('{"backend": "mmt", "src": "en", "tgt": "de"}', encoding="utf-8")
    return folder


def _system(root: Path, content: bytes) -> Path:
    """A folder whose system.json holds ``content``."""
    folder = root / "system"
    folder.mkdir(parents=True)
    (folder / "system.json").write_bytes(content + (b"]" * 99_999 if content.startswith(b"[[") else b""))
    return folder


CLI_CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    (
        "translate: no model for the pair",
        lambda root: ["translate", *flags(src="en", tgt="fr", models=root)],
        r"no trained model for en->fr",
    ),
    (
        "translate: folder without system.json",
        lambda root: ["translate", *flags(src="en", tgt="de", model=root)],
        r"system\.json: not found",
    ),
    (
        "translate: folder of another direction",
        lambda root: ["translate", *flags(src="de", tgt="en", model=_regional_folder(root))],
        r"translates en->de, not de->en",
    ),
    (
        "translate: multimodal without --store",
        lambda root: ["translate", *flags(src="en", tgt="de", model=_regional_folder(root))],
        r"give --store",
    ),
    (
        "search: model folder without its checkpoint",
        lambda root: ["search", "a dog", *flags(model=root, lang="en")],
        r"model\.safetensors: retrieval checkpoint not found",
    ),
    (
        "translate: system.json nested too deeply",
        lambda root: ["translate", *flags(src="en", tgt="de", model=_system(root, b"[" * 99_999))],
        r"system\.json: JSON nested too deeply",
    ),
    (
        "translate: system.json not UTF-8",
        lambda root: ["translate", *flags(src="en", tgt="de", model=_system(root, b'{"a": "\xff"}'))],
        r"system\.json: not UTF-8",
    ),
    (
        "translate: system.json of an unknown backend",
        lambda root: ["translate", *flags(src="en", tgt="de", model=_system(root, b'{"backend": 7}'))],
        r"system\.json: unknown backend 7",
    ),
    ("inspect: folder that is not prepared", lambda root: ["inspect", str(root)], r"no prepared corpus here"),
    ("profile: unknown", lambda root: ["profile", "table9"], r"unknown profile 'table9'"),
    ("profile: a path for a name", lambda root: ["profile", "../params"], r"unknown profile '\.\./params'"),
]


@pytest.mark.parametrize(("name", "argv", "culprit"), CLI_CASES, ids=[case[0] for case in CLI_CASES])
def test_mmtr_commands_name_the_culprit(
    name: str, argv: Callable[[Path], list[str]], culprit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _cli(argv(tmp_path), capsys)
    assert code == 2
    one_line_error(err, "mmtr", culprit)


@pytest.mark.parametrize(
    ("argv", "culprit"),
    [
        (["search", "q", "--model", "m", "--lang", "en", "-k", "-3"], r"argument -k: -3 is below 1"),
        (["search", "q", "--model", "m", "--lang", "en", "-k", "0"], r"argument -k: 0 is below 1"),
        (["search", "q", "--model", "m", "--lang", "en", "-k", "many"], r"argument -k: 'many' is not a whole"),
        (["translate", *flags(src="en", tgt="de", beam="0")], r"argument --beam: 0 is below 1"),
        (["inspect", "--samples", "-1"], r"argument --samples: -1 is below 1"),
    ],
)
def test_numeric_arguments_out_of_range(argv: list[str], culprit: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(argv, capsys)
    assert code == 2 and re.search(culprit, err) and "Traceback" not in err


def test_translate_input_that_is_missing_or_not_utf8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmtr.cli import read_input_lines

    missing = tmp_path / "nope.txt"
    with pytest.raises(cli.InputError, match=rf"^{re.escape(str(missing))}: cannot read it"):
        read_input_lines(str(missing))
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"A dog.\nA caf\xe9.\n")
    with pytest.raises(cli.InputError, match=rf"^{re.escape(str(latin))}:2: not UTF-8"):
        read_input_lines(str(latin))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xef\xbb\xbfA dog.\n\xff\n")))
    with pytest.raises(cli.InputError, match=r"^<stdin>:2: not UTF-8"):
        read_input_lines("-")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xef\xbb\xbfA dog.\n")))
    assert read_input_lines("-") == ["A dog."]  # the byte-order mark is not part of the first sentence


def test_debug_shows_the_traceback_of_the_same_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mmtr.params import ParamsError

    params = hostile_params(tmp_path, {"seed": -1})
    with pytest.raises(ParamsError, match=r"seed: got -1"):
        cli.main(flags(debug="check-params", params=params))
    monkeypatch.setenv("MMTR_DEBUG", "1")
    with pytest.raises(ParamsError, match=r"seed: got -1"):
        importlib.import_module("flows.generate").main(flags(params=params, out=tmp_path / "o"))


def test_a_prefect_server_that_does_not_answer_stops_the_stage_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as free:  # a local port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("PREFECT_API_URL", f"http://127.0.0.1:{port}/api")
    out = tmp_path / "synthetic"
    code, err = run_stage("flows.generate", REPO / "params.yaml", capsys, "--out", str(out))
    assert code == 2 and not out.exists()
    one_line_error(err, "python -m flows.generate", rf"PREFECT_API_URL=http://127\.0\.0\.1:{port}/api: no Prefect")
