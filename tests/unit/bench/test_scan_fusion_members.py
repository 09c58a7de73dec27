"""The SCAN (Fusion) members bench: each member's score alone, the spread it records, and its docs table."""

from __future__ import annotations

import torch

from bench import scan_fusion_members


class TwoMembers:
    """A fusion model's ranking scores: a narrow t2i member and a wide i2t member."""

    def ranking_similarities(self, images: object, texts: object) -> list[torch.Tensor]:
        return [torch.tensor([[0.1, 0.3], [0.2, 0.0]]), torch.tensor([[2.0, -2.0], [-2.0, 2.0]])]


def test_the_recorder_returns_the_picked_member_and_averages_the_spread_over_pairs() -> None:
    fused = scan_fusion_members.SpreadRecorder(TwoMembers(), "fused")
    assert torch.equal(fused(None, None), torch.tensor([[1.05, -0.85], [-0.9, 1.0]]))
    i2t = scan_fusion_members.SpreadRecorder(TwoMembers(), "i2t")
    assert torch.equal(i2t(None, None), torch.tensor([[2.0, -2.0], [-2.0, 2.0]]))
    i2t(None, None)  # a second chunk of 4 pairs: the same values, the same means
    spread = i2t.spread()
    assert spread["t2i"] == {"mean": 0.15, "std": round(torch.tensor([0.1, 0.3, 0.2, 0.0]).std().item(), 4)}
    assert spread["i2t"] == {"mean": 0.0, "std": 2.3094}


def test_the_stage_arguments_are_read_from_its_command() -> None:
    cmd = "python -m flows.train_retrieval --params params.yaml --model scan_fusion --store data/features/x/compact"
    arguments = scan_fusion_members.stage_arguments(cmd)
    assert arguments["--store"] == "data/features/x/compact" and arguments["--model"] == "scan_fusion"


def test_the_docs_table_gives_the_mean_over_replicates() -> None:
    spread = {"t2i": {"mean": 0.02, "std": 0.02}, "i2t": {"mean": 0.4, "std": 0.14}}
    replicates = [
        {"replicate": "first", "rsum": {"fused": {"en": 420.0}, "t2i": {"en": 480.0}, "i2t": {"en": 410.0}}},
        {"replicate": "seed-1", "rsum": {"fused": {"en": 415.0}, "t2i": {"en": 470.0}, "i2t": {"en": 405.0}}},
    ]
    record = {
        "date": "2026-11-28",
        "runs": {
            "scan_fusion-mmt_f-pivot_test": {
                "replicates": [{**entry, "spread": spread} for entry in replicates],
                "single_scan": {"en": 473.27},
            }
        },
    }
    text = scan_fusion_members.markdown(record)
    assert "| `scan_fusion-mmt_f-pivot_test` | en | 2 | 417.5 | 475.0 | 407.5 | 473.3 | 0.020 / 0.140 |" in text
