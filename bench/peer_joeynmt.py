"""A peer side by side: the text-only RegionalMMT against JoeyNMT's RNN attention model, on the same Multi30K text.

What: both systems train on Multi30K task 1 (29,000 pairs, en->de by default) for the same wall time each
(``--minutes``), one after the other or at the same time (``--together``: the load of a shared machine then
falls on both alike), on this machine with the same thread count, and the bench reports their
training throughput (target tokens/s: non-PAD target positions, EOS included, over training time only) and
their validation BLEU at checkpoints over time, scored by the project's own scorer (``mmt.metrics``, BLEU on
lowercased Moses-tokenised text) on both outputs, and the BLEU reached within the budget.

What is matched: the same sentencepiece BPE vocabularies and segmentation (the project's ``TextPipeline``,
lowercased; JoeyNMT reads the segmented text and a fixed vocabulary file of the same pieces, so both models see
identical subword sequences and vocabulary sizes); a 1-layer bidirectional LSTM encoder and a 1-layer LSTM decoder
with Luong "general" attention, input feeding and a tanh bridge from the encoder's final states to the decoder's
initial state; the embedding and hidden sizes; one dropout rate (embeddings and the attentional vector; the project
also drops out encoder states); batches of ``--batch`` sentences; Adam at ``--lr`` with a constant rate; gradient
norm clipping at 5; the loss averaged over target tokens; validation every ``--validate-every`` steps by greedy
decoding of the whole val set, at most 100 subwords. Not matched: the batching (the project sorts chunks of 20
batches by length, JoeyNMT shuffles), JoeyNMT's validation also computes the validation loss and writes a checkpoint,
and its output layer has no bias. The wall time of each system counts from the start of its training loop (data
and model built) and includes its own validations; a validation that ends after the budget is not counted.

Setup: JoeyNMT is a peer for this bench only, never a project dependency (it pins an old protobuf and pulls
tensorboard, pylint and datasets), so it lives in a virtual environment of its own, run as a subprocess through
bench/joeynmt_driver.py (JoeyNMT's ``train`` command plus timing lines):

    python3 -m venv .venv-joeynmt
    .venv-joeynmt/bin/pip install torch==2.13.0 joeynmt==2.3.0 importlib_metadata   # 2.3 imports it undeclared

    python bench/peer_joeynmt.py --peer-python .venv-joeynmt/bin/python --together --threads 1 --minutes 15 \
        --validate-every 40                                        # bench/results/peer_joeynmt.json
    python bench/peer_joeynmt.py --small                           # 1 minute each on 2,000 pairs (the project alone
                                                                   # without --peer-python)
    python bench/peer_joeynmt.py --markdown bench/results/peer_joeynmt.json --into docs/translation.md
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from common.files import write_text
from mmt.metrics import translation_scores
from mmt.model import MMTConfig, MMTShape, RegionalMMT
from mmt.text import EOS_ID, UNK_ID, SubwordConfig, TextPipeline
from mmt.train import Example, TrainConfig, _update, adam, collate, length_batches, mmt_loss, parameter_groups
from mmt.translator import MMTTranslator
from mmtr.doc_sections import add_section_arguments, publish_section

BENCH = Path(__file__).resolve().parent
DEFAULT_OUT = BENCH / "results" / "peer_joeynmt.json"
DRIVER = BENCH / "joeynmt_driver.py"
SECTION = "peer_joeynmt"  # the docs section this bench writes (mmtr.doc_sections)
MAX_LEN = 100  # subwords per sentence (the project's max_len) and the greedy decoding limit of both systems
SMALL_PAIRS, SMALL_VAL = 2000, 100


@dataclass(frozen=True)
class Sizes:
    """What both systems are given alike."""

    vocab: int
    emb: int
    hidden: int
    dropout: float
    batch: int
    lr: float
    clip: float
    threads: int
    minutes: float
    validate_every: int
    train_pairs: int
    val_pairs: int


@dataclass(frozen=True)
class Segmented:
    """Both sides' text as the project segments it: ids (targets end with EOS) and the vocabularies' pieces."""

    train_src: list[list[int]]
    train_tgt: list[list[int]]
    val_src: list[str]
    val_tgt: list[str]
    text: TextPipeline
    src_pieces: list[str]
    tgt_pieces: list[str]


def read_lines(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()


def load_text(data: Path, src: str, tgt: str, *, small: bool) -> dict[str, tuple[list[str], list[str]]]:
    """Multi30K task 1's train and val pairs (``--small``: the first 2,000 and 100)."""
    raw = data / "task1" / "raw"
    split = {}
    for name, keep in (("train", SMALL_PAIRS), ("val", SMALL_VAL)):
        sources, targets = read_lines(raw / f"{name}.{src}.gz"), read_lines(raw / f"{name}.{tgt}.gz")
        if len(sources) != len(targets):
            raise SystemExit(f"{raw}: {name}.{src}.gz has {len(sources)} lines, {name}.{tgt}.gz {len(targets)}")
        split[name] = (sources[:keep], targets[:keep]) if small else (sources, targets)
    return split


def segment(split: dict[str, tuple[list[str], list[str]]], src: str, tgt: str, vocab: int, work: Path) -> Segmented:
    """Train the project's lowercased BPE vocabularies on the training text and segment it."""
    config = SubwordConfig(lowercase=True, vocab_size=vocab, joint=False, max_len=MAX_LEN)
    train_src, train_tgt = split["train"]
    text = TextPipeline.train(train_src, train_tgt, src_lang=src, tgt_lang=tgt, config=config, out_dir=work, seed=0)
    return Segmented(
        train_src=text.encode_source(train_src).ids,
        train_tgt=text.encode_target(train_tgt).ids,
        val_src=split["val"][0],
        val_tgt=split["val"][1],
        text=text,
        src_pieces=[text.src_vocab.piece(i) for i in range(text.src_vocab.size)],
        tgt_pieces=[text.tgt_vocab.piece(i) for i in range(text.tgt_vocab.size)],
    )


def training_examples(segmented: Segmented) -> list[Example]:
    return [Example(tuple(s), tuple(t)) for s, t in zip(segmented.train_src, segmented.train_tgt, strict=True)]


def score(hypotheses: Sequence[str], references: Sequence[str], tgt: str) -> float:
    """The project's BLEU (lowercased, Moses-tokenised); the systems are lowercased, so are the references."""
    value = translation_scores(hypotheses, [reference.lower() for reference in references], tgt)["bleu"]
    assert isinstance(value, float)
    return value


# ----------------------------------------------------------------------------------------------------- the project


def run_project(segmented: Segmented, sizes: Sizes, tgt: str) -> dict[str, Any]:
    """``mmt.train.fit``'s training step (batches, collate, loss, ``_update``), validated every
    ``validate_every`` steps, until the wall-time budget; fit itself has no time budget and validates per epoch."""
    text = segmented.text
    examples = training_examples(segmented)
    shape = MMTShape(src_vocab=text.src_vocab.size, tgt_vocab=text.tgt_vocab.size, max_len=MAX_LEN)
    model = RegionalMMT(MMTConfig(emb_dim=sizes.emb, hidden=sizes.hidden, dropout=sizes.dropout), shape)
    cpu = torch.device("cpu")
    translator = MMTTranslator(model, text, name="text-only", regions=None, device=cpu)
    config = TrainConfig(batch_size=sizes.batch, lr=sizes.lr, clip=sizes.clip)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    optimizer = adam(parameter_groups(model, config), lr=config.lr, device=cpu)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    started = time.perf_counter()
    deadline = started + sizes.minutes * 60
    train_seconds, tokens, step, epoch = 0.0, 0, 0, 0
    validations: list[dict[str, float]] = []
    model.train()
    while time.perf_counter() < deadline:
        epoch += 1
        for indices in length_batches(examples, batch_size=config.batch_size, sort_chunk=config.sort_chunk, rng=rng):
            before = time.perf_counter()
            batch, tgt_in, tgt_out = collate(examples, indices, regions=None, shape=shape, device=cpu)
            loss = mmt_loss(model, batch, tgt_in, tgt_out)
            _update(model, optimizer, scaler, loss, clip=config.clip, step=step + 1, epoch=epoch)
            after = time.perf_counter()
            step, train_seconds = step + 1, train_seconds + after - before
            tokens += int((tgt_out != shape.pad_id).sum())
            if after > deadline:
                break
            if step % sizes.validate_every == 0:
                model.eval()
                with torch.no_grad():
                    bleu = score(
                        translator.translate(segmented.val_src, beam=1, batch_size=128), segmented.val_tgt, tgt
                    )
                model.train()
                done = time.perf_counter()
                if done > deadline:
                    break
                validations.append(_validation(step, done - started, train_seconds, done - after, bleu))
        else:
            continue
        break
    padding = padded_fraction(
        examples, length_batches(examples, batch_size=sizes.batch, sort_chunk=config.sort_chunk, rng=rng)
    )
    return _system(
        "project (RegionalMMT text-only)", step, tokens, train_seconds, validations, epochs=epoch, padding=padding
    )


def padded_fraction(examples: Sequence[Example], batches: Sequence[Sequence[int]]) -> float:
    """The share of PAD among the target positions of ``batches``: work a step does for no token."""
    positions = sum(len(batch) * max(len(examples[i].tgt_ids) for i in batch) for batch in batches)
    return 1.0 - sum(len(examples[i].tgt_ids) for batch in batches for i in batch) / positions


# ------------------------------------------------------------------------------------------------------ the peer


def joeynmt_config(sizes: Sizes, *, data_dir: Path, model_dir: Path, src: str, tgt: str) -> dict[str, Any]:
    """JoeyNMT 2.3's configuration of the matched RNN attention model (module docstring: what is matched)."""

    def side(lang: str) -> dict[str, Any]:
        return {
            "lang": lang,
            "level": "word",  # the text is already segmented into the project's pieces, one per space
            "lowercase": False,
            "max_length": MAX_LEN,
            "voc_file": str(data_dir / f"vocab.{lang}"),
            "tokenizer_cfg": {"pretokenizer": "none"},
        }

    def embeddings() -> dict[str, Any]:
        return {"embedding_dim": sizes.emb, "scale": False, "dropout": sizes.dropout}

    return {
        "name": "peer_joeynmt",
        "joeynmt_version": "2.3.0",
        "model_dir": str(model_dir),
        "use_cuda": False,
        "random_seed": 0,
        "data": {
            "train": str(data_dir / "train"),
            "dev": str(data_dir / "val"),
            "dataset_type": "plain",
            "src": side(src),
            "trg": side(tgt),
        },
        "testing": {
            "beam_size": 1,
            "batch_size": 128,
            "batch_type": "sentence",
            "max_output_length": MAX_LEN,
            "eval_metrics": ["bleu"],
        },
        "training": {
            "optimizer": "adam",
            "learning_rate": sizes.lr,
            # JoeyNMT 2.3 needs a scheduler (and its "plateau" one fails on this torch): decay by 1 is constant
            "scheduling": "exponential",
            "decrease_factor": 1.0,
            "clip_grad_norm": sizes.clip,
            "batch_size": sizes.batch,
            "batch_type": "sentence",
            "normalization": "tokens",
            "label_smoothing": 0.0,
            "epochs": 10_000,  # the bench stops it at the budget
            "validation_freq": sizes.validate_every,
            "logging_freq": logging_every(sizes.validate_every),
            "early_stopping_metric": "bleu",
            "keep_best_ckpts": 1,
            "overwrite": True,
            "shuffle": True,
            "print_valid_sents": [],
        },
        "model": {
            "initializer": "xavier_uniform",
            "encoder": {
                "type": "recurrent",
                "rnn_type": "lstm",
                "hidden_size": sizes.hidden,
                "bidirectional": True,
                "num_layers": 1,
                "dropout": sizes.dropout,
                "embeddings": embeddings(),
            },
            "decoder": {
                "type": "recurrent",
                "rnn_type": "lstm",
                "hidden_size": sizes.hidden,
                "attention": "luong",
                "input_feeding": True,
                "init_hidden": "bridge",
                "num_layers": 1,
                "dropout": sizes.dropout,
                "hidden_dropout": sizes.dropout,
                "embeddings": embeddings(),
            },
        },
    }


def write_joeynmt_config(path: Path, sizes: Sizes, *, data_dir: Path, model_dir: Path, src: str, tgt: str) -> None:
    """:func:`joeynmt_config` as the YAML file JoeyNMT reads."""
    config = joeynmt_config(sizes, data_dir=data_dir, model_dir=model_dir, src=src, tgt=tgt)
    write_text(path, yaml.safe_dump(config, sort_keys=False))


def logging_every(validate_every: int) -> int:
    """JoeyNMT's logging interval (its training-time figures come with each log): at most 10 steps, below the
    validation interval and dividing it, as JoeyNMT requires."""
    return max(step for step in range(1, min(10, validate_every - 1) + 1) if validate_every % step == 0)


def write_peer_data(segmented: Segmented, data_dir: Path, src: str, tgt: str) -> None:
    """The segmented training text (pieces joined by spaces, no EOS: JoeyNMT adds its own), the val text segmented
    alike, and each side's vocabulary file: the project's pieces after its four special ids, which JoeyNMT puts
    first itself, so both vocabularies have the same size."""
    data_dir.mkdir(parents=True, exist_ok=True)
    text = segmented.text

    def lines(rows: Sequence[Sequence[int]], pieces: Sequence[str]) -> str:
        return "".join(" ".join(pieces[i] for i in row if i != EOS_ID) + "\n" for row in rows)

    val_src, val_tgt = text.encode_source(segmented.val_src).ids, text.encode_target(segmented.val_tgt).ids
    for stem, rows_src, rows_tgt in (("train", segmented.train_src, segmented.train_tgt), ("val", val_src, val_tgt)):
        write_text(data_dir / f"{stem}.{src}", lines(rows_src, segmented.src_pieces))
        write_text(data_dir / f"{stem}.{tgt}", lines(rows_tgt, segmented.tgt_pieces))
    write_text(data_dir / f"vocab.{src}", "".join(piece + "\n" for piece in segmented.src_pieces[4:]))
    write_text(data_dir / f"vocab.{tgt}", "".join(piece + "\n" for piece in segmented.tgt_pieces[4:]))


def decode_peer(lines: Sequence[str], segmented: Segmented) -> list[str]:
    """JoeyNMT's space-separated pieces back to text through the project's own decoder (unknown pieces: UNK)."""
    ids = {piece: i for i, piece in enumerate(segmented.tgt_pieces)}
    return segmented.text.decode_target([[ids.get(piece, UNK_ID) for piece in line.split()] for line in lines])


class PeerRun:
    """JoeyNMT trained through bench/joeynmt_driver.py in a process of its own, stopped at the budget (counted from
    its ``start`` line); its validation outputs are scored here. A thread reads its output as it comes, so that the
    budget is kept however long the peer stays silent and the project can train meanwhile (``--together``)."""

    def __init__(
        self, segmented: Segmented, sizes: Sizes, *, peer_python: Path, src: str, tgt: str, work: Path
    ) -> None:
        self.segmented, self.sizes, self.tgt = segmented, sizes, tgt
        data_dir, self.model_dir = work / "peer-data", work / "peer-model"
        write_peer_data(segmented, data_dir, src, tgt)
        config_path = work / "peer.yaml"
        write_joeynmt_config(config_path, sizes, data_dir=data_dir, model_dir=self.model_dir, src=src, tgt=tgt)
        env = {**os.environ, "OMP_NUM_THREADS": str(sizes.threads), "MKL_NUM_THREADS": str(sizes.threads)}
        self.process = subprocess.Popen(
            [str(peer_python), str(DRIVER), str(config_path), str(sizes.threads)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: stopped as a whole
        )
        self.events: list[dict[str, Any]] = []
        self.tail: list[str] = []
        self.started = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("PEER "):
                self.events.append(json.loads(line[5:]))
                if self.events[-1]["kind"] == "start":
                    self.started.set()
            else:
                self.tail = [*self.tail[-40:], line.rstrip()]
        self.started.set()  # the process ended: nobody waits for a start that will not come

    def finish(self) -> dict[str, Any]:
        """Wait for the budget, stop the peer and read its figures."""
        self.started.wait()
        starts = [event["time"] for event in self.events if event["kind"] == "start"]
        if not starts:
            self.process.wait()
            raise SystemExit(
                f"JoeyNMT stopped before training (exit {self.process.returncode}):\n" + "\n".join(self.tail)
            )
        started = starts[0]
        deadline = started + self.sizes.minutes * 60
        time.sleep(max(0.0, deadline - time.time()))
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.reader.join()
        trained = [event for event in self.events if event["kind"] == "train" and event["time"] <= deadline]
        validations = []
        for event in self.events:
            if event["kind"] != "validated" or event["time"] > deadline:
                continue
            hyps = (self.model_dir / f"{event['step']}.hyps").read_text(encoding="utf-8").splitlines()
            bleu = score(decode_peer(hyps, self.segmented), self.segmented.val_tgt, self.tgt)
            before = sum(item["seconds"] for item in trained if item["step"] <= event["step"])
            validations.append(_validation(event["step"], event["time"] - started, before, event["seconds"], bleu))
        return _system(
            "JoeyNMT 2.3 (RNN, Luong attention)",
            max((event["step"] for event in trained), default=0),
            sum(event["tokens"] for event in trained),
            sum(event["seconds"] for event in trained),
            validations,
            padding=self.padding(),
        )

    def padding(self) -> float:
        """:func:`padded_fraction` of an epoch of JoeyNMT's batches: shuffled, never sorted by length."""
        examples = training_examples(self.segmented)
        order = np.random.default_rng(0).permutation(len(examples)).tolist()
        size = self.sizes.batch
        return padded_fraction(examples, [order[first : first + size] for first in range(0, len(order), size)])


# ----------------------------------------------------------------------------------------------------- the record


def _validation(step: int, wall: float, train_seconds: float, seconds: float, bleu: float) -> dict[str, float]:
    return {
        "step": step,
        "minutes": wall / 60,
        "train_seconds": train_seconds,
        "validation_seconds": seconds,
        "bleu": bleu,
    }


def _system(
    name: str, steps: int, tokens: int, train_seconds: float, validations: list[dict[str, float]], **extra: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "steps": steps,
        "target_tokens": tokens,
        "train_seconds": train_seconds,
        "tokens_per_s": tokens / train_seconds if train_seconds else 0.0,
        "validations": validations,
        "bleu_at_budget": validations[-1]["bleu"] if validations else None,
        **extra,
    }


def markdown(record: dict[str, Any]) -> str:
    """The run as a Markdown table, with a line saying where and how it ran."""
    sizes, load = record["sizes"], record["load_average"]
    cores = f" of {record['cpus']} CPU cores" if record.get("cpus") else ""
    lines = [
        f"Run of {record['created']}: Multi30K task 1 {record['src']}->{record['tgt']}, {sizes['train_pairs']:,} "
        f"training pairs, {sizes['minutes']:g} min of wall time each "
        f"({'at the same time' if record.get('together') else 'one after the other'}), {sizes['threads']} threads "
        f"each{cores}, torch {record['torch']}; BPE {sizes['vocab']:,} per side, emb {sizes['emb']}, "
        f"hidden {sizes['hidden']}, batch {sizes['batch']}, Adam {sizes['lr']:g}; "
        f"load average {load['start'][0]:.2f} at the start, "
        f"{load['end'][0]:.2f} at the end.",
        "",
        "| system | steps | target tokens/s (training) | PAD in target batches | target positions/s (tokens + PAD) "
        "| val BLEU at budget | val BLEU over time (min: BLEU) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for system in record["systems"]:
        over_time = ", ".join(f"{item['minutes']:.1f}: {item['bleu']:.2f}" for item in system["validations"])
        bleu = system["bleu_at_budget"]
        lines.append(
            f"| {system['name']} | {system['steps']:,} | {system['tokens_per_s']:,.0f} | {system['padding']:.0%} | "
            f"{system['tokens_per_s'] / (1 - system['padding']):,.0f} | "
            f"{'-' if bleu is None else f'{bleu:.2f}'} | {over_time or '-'} |"
        )
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"), help="Multi30K data folder")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--peer-python", type=Path, help="the Python of a virtual environment holding joeynmt")
    parser.add_argument("--minutes", type=float, help="wall time of each system (default 10; --small: 1)")
    parser.add_argument("--validate-every", type=int, help="steps between validations (default 250; --small: 10)")
    parser.add_argument("--small", action="store_true", help="1 minute each on the first 2,000 pairs, 100 val pairs")
    parser.add_argument("--vocab", type=int, help="BPE vocabulary per side (default 8,000; --small: 1,000)")
    parser.add_argument("--emb", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--batch", type=int, default=64, help="sentences per batch")
    parser.add_argument("--lr", type=float, default=4e-4)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each system")
    parser.add_argument(
        "--together", action="store_true", help="train both at once (a shared machine's load then hits both alike)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    add_section_arguments(parser)
    args = parser.parse_args(argv)
    args.minutes = args.minutes or (1.0 if args.small else 10.0)
    args.validate_every = args.validate_every or (10 if args.small else 250)
    args.vocab = args.vocab or (1000 if args.small else 8000)
    if args.validate_every < 2:
        parser.error("--validate-every: at least 2 (JoeyNMT logs more often than it validates)")
    if args.peer_python is not None and not args.peer_python.is_file():
        parser.error(f"--peer-python {args.peer_python}: no such file")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if publish_section(args, SECTION, markdown):
        return
    load_start = os.getloadavg()
    torch.set_num_threads(args.threads)
    split = load_text(args.data, args.src, args.tgt, small=args.small)
    with tempfile.TemporaryDirectory(prefix="peer-joeynmt-") as folder:
        work = Path(folder)
        segmented = segment(split, args.src, args.tgt, args.vocab, work)
        sizes = Sizes(
            vocab=args.vocab,
            emb=args.emb,
            hidden=args.hidden,
            dropout=args.dropout,
            batch=args.batch,
            lr=args.lr,
            clip=5.0,
            threads=args.threads,
            minutes=args.minutes,
            validate_every=args.validate_every,
            train_pairs=len(segmented.train_src),
            val_pairs=len(segmented.val_src),
        )

        def peer() -> PeerRun:
            assert args.peer_python is not None
            return PeerRun(segmented, sizes, peer_python=args.peer_python, src=args.src, tgt=args.tgt, work=work)

        together = peer() if args.peer_python is not None and args.together else None
        systems = [run_project(segmented, sizes, args.tgt)]
        print(f"project: {systems[0]['tokens_per_s']:.0f} target tokens/s, {systems[0]['steps']} steps", flush=True)
        if args.peer_python is not None:
            systems.append((together or peer()).finish())
    record = {
        "bench": "peer_joeynmt",
        "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "src": args.src,
        "tgt": args.tgt,
        "small": args.small,
        "together": args.together,
        "torch": torch.__version__,
        "sizes": asdict(sizes),
        "cpus": os.cpu_count(),
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "systems": systems,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(record, indent=2) + "\n")
    print(markdown(record), end="")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
