"""Real-data anchor (not a test): the text-only model on Multi30K task1, scored on test2016.

Trains `RegionalMMT` in its text-only mode on the 29,000 training pairs (en->de by default), early-stops on
validation BLEU (greedy, every epoch), then translates test2016 with beam search and prints BLEU on
lowercased Moses-tokenised text (as the literature reports), sacreBLEU on detokenised text and chrF (both
against lowercased references: the system is lowercased) and the wall time. Published Multi30K-only text
NMT: 33.7-35.5 BLEU (lowercased, tokenised).

    python bench/mmt_multi30k.py --data ../shared/data/multi30k [--src en --tgt de] [--budget-minutes 120]
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from mmt.metrics import translation_scores
from mmt.model import MMTConfig, MMTShape, RegionalMMT
from mmt.text import SubwordConfig, TextPipeline
from mmt.train import Example, TrainConfig, fit
from mmt.translator import MMTTranslator


class OutOfTime(Exception):
    pass


def read(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--budget-minutes", type=float, default=120.0, help="wall-time budget for training")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--emb", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    raw = args.data / "task1" / "raw"
    split = {
        name: (read(raw / f"{stem}.{args.src}.gz"), read(raw / f"{stem}.{args.tgt}.gz"))
        for name, stem in (("train", "train"), ("val", "val"), ("test", "test_2016_flickr"))
    }
    work = Path(tempfile.mkdtemp(prefix="mmt-multi30k-"))
    subwords = SubwordConfig(lowercase=True, vocab_size=args.vocab, joint=False, max_len=100)
    text = TextPipeline.train(
        *split["train"], src_lang=args.src, tgt_lang=args.tgt, config=subwords, out_dir=work, seed=0
    )
    sources, targets = text.encode_source(split["train"][0]), text.encode_target(split["train"][1])
    examples = [Example(tuple(s), tuple(t)) for s, t in zip(sources.ids, targets.ids, strict=True)]
    config = MMTConfig(emb_dim=args.emb, hidden=args.hidden, dropout=args.dropout)
    model = RegionalMMT(config, MMTShape(src_vocab=text.src_vocab.size, tgt_vocab=text.tgt_vocab.size))
    cpu = torch.device("cpu")
    translator = MMTTranslator(model, text, name="text-only", regions=None, device=cpu)
    val_src, val_tgt = split["val"]
    deadline = started + args.budget_minutes * 60

    def validate(_: RegionalMMT) -> float:
        hypotheses = translator.translate(val_src, beam=1, batch_size=128)
        score = translation_scores(hypotheses, val_tgt, args.tgt)["bleu"]
        assert isinstance(score, float)
        return score

    def on_batch(record: dict[str, float]) -> None:
        if "score" in record:
            print(
                f"epoch {record['epoch']:.0f} step {record['step']:.0f}: val BLEU {record['score']:.2f} "
                f"({(time.perf_counter() - started) / 60:.1f} min)",
                flush=True,
            )
        if time.perf_counter() > deadline:
            raise OutOfTime

    checkpoint = work / "best.pt"
    try:
        fit(
            model,
            examples,
            regions=None,
            evaluate=validate,
            config=TrainConfig(epochs=100, batch_size=args.batch, patience=3),
            seed=0,
            device=cpu,
            autocast=nullcontext,
            checkpoint_path=checkpoint,
            progress=on_batch,
        )
        stopped = "early stopping"
    except OutOfTime:
        stopped = f"time budget ({args.budget_minutes:.0f} min)"
        if checkpoint.is_file():
            model.load_state_dict(torch.load(checkpoint, weights_only=True)["state_dict"])
    trained = time.perf_counter()
    test_src, test_tgt = split["test"]
    hypotheses = translator.translate(test_src, beam=args.beam, batch_size=64)
    # The system is lowercased (the literature's convention), so cased sacreBLEU/chrF would only measure casing.
    scores = translation_scores(hypotheses, [reference.lower() for reference in test_tgt], args.tgt)
    print(
        f"\nMulti30K test2016 {args.src}->{args.tgt}, text-only RegionalMMT (emb {args.emb}, hidden {args.hidden}, "
        f"BPE {args.vocab}), stopped by {stopped}"
    )
    print(f"BLEU (lowercased, tokenised): {scores['bleu']:.2f}")
    print(f"sacreBLEU (detokenised, lowercased references): {scores['sacrebleu']:.2f}")
    print(f"chrF (lowercased references): {scores['chrf']:.2f}")
    print(
        f"wall time: training {(trained - started) / 60:.1f} min, test decoding (beam {args.beam}) "
        f"{time.perf_counter() - trained:.0f} s, {args.threads} threads"
    )


if __name__ == "__main__":
    main()
