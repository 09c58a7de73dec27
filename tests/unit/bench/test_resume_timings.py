"""bench/resume_timings.py: the docs' sentence comes from the JSON alone."""

from __future__ import annotations

from bench.resume_timings import markdown

RECORD = {
    "bench": "resume_timings",
    "cpus": 2,
    "loadavg_start": [0.5, 0.4, 0.3],
    "loadavg_end": [1.25, 0.9, 0.5],
    "epochs": 6,
    "killed_after_epoch": 2,
    "uninterrupted_s": 52.3,
    "killed_after_s": 34.2,
    "resumed_s": 33.3,
}


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_retrieval_sentence_states_every_timing_of_the_record() -> None:
    sentence = flat(markdown({**RECORD, "stage": "train_retrieval"}))
    assert "`tests/flows/test_retrieval_resume.py` (`bench/results/resume_timings-train_retrieval.json`)" in sentence
    assert "two replicates of 6 epochs ran whole in 52.3 s" in sentence
    assert "killed after the second replicate's epoch 2 had run 34.2 s, and its rerun took 33.3 s" in sentence
    assert "the second's last 4 epochs" in sentence
    assert "inflated" not in sentence  # load 1.25 on 2 cores: not a loaded machine


def test_the_mmt_sentence_says_a_loaded_machine_inflates_the_figures() -> None:
    sentence = flat(markdown({**RECORD, "stage": "train_mmt", "epochs": 3, "loadavg_end": [9.0, 8.0, 7.0]}))
    assert "both directions' MMT (pre-training, then 3 fine-tuning epochs) ran whole in 52.3 s" in sentence
    assert "the en->de fine-tuning's last 1 epoch," in sentence
    assert "load average 0.5 at the start and 9 at the end (a shared machine: every figure is inflated)" in sentence
