"""Greedy decoding and beam search for :class:`~mmt.model.RegionalMMT`.

:func:`beam_search` is vectorised over sentences x beams x threads: the encoder runs once per sentence and is
shared by the beam through the decoder's ``rows per sentence`` axis (no copy of the K x T encoder states per
hypothesis); every step is one decoder call on B x beam rows and one batched ``topk`` over each sentence's
beam x V candidates.

Search rules (shared by :func:`beam_search` and the one-sentence :func:`beam_search_reference`; nmtpytorch's):
- Hypotheses are ranked by their summed log-probability while searching. The first step expands the BOS
  hypothesis only, so ``beam`` must not exceed the number of tokens that may be generated (V - 2: never PAD/BOS).
- A hypothesis that emits EOS is finished and stays in the beam with its score frozen; it competes with the
  open ones and leaves the beam only when ``beam`` better-scoring continuations push it out.
- The search stops when every hypothesis in the beam of every sentence is finished, or after ``max_len`` tokens.
- The answer of a sentence is the hypothesis of its final beam with the best score / length**length_penalty,
  length counting the generated tokens including EOS (0: raw log-probability; 1: mean per token, nmtpytorch's
  default normalisation). Ties go to the higher-ranked hypothesis.
- Returned ids exclude BOS and EOS; a hypothesis cut at ``max_len`` has no EOS.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from mmt.model import DecoderState, RegionalMMT, SourceBatch, source_batch


@contextlib.contextmanager
def evaluating(model: RegionalMMT) -> Iterator[None]:
    """Eval mode (no dropout) inside the block, the previous mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def greedy_decode(model: RegionalMMT, batch: SourceBatch, *, max_len: int) -> list[list[int]]:
    """Most probable next token at every step, for B sentences at once.

    Args:
        model: The translation model (switched to eval mode for the call).
        batch: B source sentences (and regions), on the model's device.
        max_len: Most generated tokens per sentence, EOS included.

    Returns:
        B lists of target ids without BOS/EOS.
    """
    _check_max_len(max_len)
    eos = model.shape.eos_id
    with evaluating(model):
        encoded = model.encode(batch)
        state = model.initial_state(encoded)
        previous = torch.full((len(batch),), model.shape.bos_id, dtype=torch.long, device=batch.src.device)
        finished = torch.zeros(len(batch), dtype=torch.bool, device=batch.src.device)
        outputs = []
        for _ in range(max_len):
            log_probs, state = model.decode_step(encoded, previous, state)
            previous = log_probs.argmax(dim=-1).masked_fill(finished, eos)  # finished rows only repeat EOS
            outputs.append(previous)
            finished = finished | (previous == eos)
            if bool(finished.all()):
                break
    return [_until_eos(row, eos) for row in torch.stack(outputs, dim=1).tolist()]


@torch.no_grad()
def beam_search(
    model: RegionalMMT, batch: SourceBatch, *, beam: int = 5, max_len: int = 100, length_penalty: float = 1.0
) -> list[list[int]]:
    """Beam search over B sentences at once (the caller splits a corpus into batches).

    Args:
        model: The translation model (switched to eval mode for the call).
        batch: B source sentences (and regions), on the model's device.
        beam: Hypotheses kept per sentence.
        max_len: Most generated tokens per sentence, EOS included.
        length_penalty: alpha of the final ranking score / length**alpha.

    Returns:
        B lists of target ids without BOS/EOS, the best hypothesis of each sentence.
    """
    _check_search(model, beam, max_len)
    eos = model.shape.eos_id
    with evaluating(model):
        encoded = model.encode(batch)
        state = model.initial_state(encoded, rows_per_sentence=beam)
        beams = _Beams.start(len(batch), beam, device=batch.src.device)
        previous = torch.full((len(batch) * beam,), model.shape.bos_id, dtype=torch.long, device=batch.src.device)
        first_row = torch.arange(len(batch), device=batch.src.device)[:, None] * beam  # (B, 1) row of beam 0
        for _ in range(max_len):
            log_probs, state = model.decode_step(encoded, previous, state)
            beams, origin = beams.advance(log_probs.view(len(batch), beam, -1), eos_id=eos)  # (B, beam, V) in
            state = state.select((first_row + origin).view(-1))  # (B*beam,) rows of the parent hypotheses
            previous = beams.history[:, :, -1].reshape(-1)  # (B*beam,) their new tokens
            if bool(beams.finished.all()):
                break
        chosen = beams.best(length_penalty)
    return [_until_eos(row, eos) for row in chosen.tolist()]


@dataclass(frozen=True)
class _Beams:
    """The hypotheses of B sentences x beam, as tensors (B, beam, ...), best first within a sentence.

    Attributes:
        scores: (B, beam) summed log-probabilities (-inf for the empty slots before the first step).
        history: (B, beam, t) generated tokens; a finished hypothesis repeats EOS.
        finished: (B, beam) whether the hypothesis has emitted EOS.
        lengths: (B, beam) generated tokens up to and including the first EOS.
    """

    scores: torch.Tensor
    history: torch.Tensor
    finished: torch.Tensor
    lengths: torch.Tensor

    @classmethod
    def start(cls, sentences: int, beam: int, *, device: torch.device) -> _Beams:
        """One empty hypothesis per sentence (score 0) and beam - 1 empty slots (score -inf)."""
        scores = torch.full((sentences, beam), float("-inf"), device=device)
        scores[:, 0] = 0.0
        zeros = torch.zeros(sentences, beam, dtype=torch.long, device=device)
        return cls(scores, zeros[..., None][..., :0], zeros.bool(), zeros)  # history (B, beam, 0)

    def advance(self, log_probs: torch.Tensor, *, eos_id: int) -> tuple[_Beams, torch.Tensor]:
        """Keep the ``beam`` best one-token extensions of each sentence's hypotheses.

        Args:
            log_probs: (B, beam, V) next-token log-probabilities of each hypothesis.

        Returns:
            The new beams and (B, beam) the index of each new hypothesis' parent in the old beam.
        """
        sentences, beam, vocab = log_probs.shape
        eos_only = torch.full((vocab,), float("-inf"), dtype=log_probs.dtype, device=log_probs.device)
        eos_only[eos_id] = 0.0
        log_probs = torch.where(self.finished[..., None], eos_only, log_probs)  # finished: one free EOS extension
        candidates = self.scores.to(log_probs.dtype)[..., None] + log_probs  # (B, beam, V)
        scores, flat = candidates.view(sentences, beam * vocab).topk(beam, dim=1)  # (B, beam), best first
        origin, token = flat // vocab, flat % vocab  # (B, beam) parent hypothesis and its new token
        history = self.history.gather(1, origin[..., None].expand_as(self.history))
        was_finished = self.finished.gather(1, origin)
        lengths = self.lengths.gather(1, origin) + (~was_finished).long()
        beams = _Beams(scores, torch.cat([history, token[..., None]], dim=2), was_finished | (token == eos_id), lengths)
        return beams, origin

    def best(self, length_penalty: float) -> torch.Tensor:
        """(B, t) history of each sentence's hypothesis with the best score / length**length_penalty."""
        normalised = self.scores / self.lengths.to(self.scores.dtype) ** length_penalty  # (B, beam)
        best = normalised.argmax(dim=1)  # first maximum: ties go to the higher-ranked hypothesis
        return self.history[torch.arange(len(best), device=best.device), best]


@dataclass(frozen=True)
class _Hypothesis:
    tokens: list[int]  # generated ids, EOS included once finished
    score: torch.Tensor | float  # summed log-probability (a 0-dim tensor after the first step)
    finished: bool
    state: DecoderState  # decoder state before reading tokens[-1]


@torch.no_grad()
def beam_search_reference(
    model: RegionalMMT,
    src_ids: Sequence[int],
    *,
    regions: torch.Tensor | None = None,
    region_mask: torch.Tensor | None = None,
    beam: int = 5,
    max_len: int = 100,
    length_penalty: float = 1.0,
) -> list[int]:
    """The same search as :func:`beam_search` for ONE sentence, hypothesis by hypothesis, with no batching.

    Deliberately simple (and slow): it exists to check the vectorised search, which must return exactly its
    output. Regions are (K, D) with a (K,) mask, or None for text-only.
    """
    _check_search(model, beam, max_len)
    shape = model.shape
    device = model.output.weight.device
    with evaluating(model):
        batch = source_batch(
            [list(src_ids)],
            pad_id=shape.pad_id,
            device=device,
            regions=None if regions is None else regions[None],
            region_mask=None if region_mask is None else region_mask[None],
        )
        encoded = model.encode(batch)
        hypotheses = [_Hypothesis([], 0.0, False, model.initial_state(encoded))]
        for _ in range(max_len):
            candidates: list[_Hypothesis] = []
            for hypothesis in hypotheses:
                if hypothesis.finished:
                    candidates.append(hypothesis)  # stays with its score
                    continue
                previous = hypothesis.tokens[-1] if hypothesis.tokens else shape.bos_id
                step_input = torch.tensor([previous], device=device)
                log_probs, state = model.decode_step(encoded, step_input, hypothesis.state)
                # Only a hypothesis' own `beam` best tokens can be among the `beam` best candidates overall.
                top, ids = log_probs[0].topk(beam)
                for log_prob, token in zip(top, ids.tolist(), strict=True):
                    tokens = [*hypothesis.tokens, token]
                    candidates.append(_Hypothesis(tokens, hypothesis.score + log_prob, token == shape.eos_id, state))
            candidates.sort(key=lambda candidate: float(candidate.score), reverse=True)
            hypotheses = candidates[:beam]
            if all(hypothesis.finished for hypothesis in hypotheses):
                break
        best = max(hypotheses, key=lambda hypothesis: _normalised(hypothesis, length_penalty))
    return _until_eos(best.tokens, shape.eos_id)


def _normalised(hypothesis: _Hypothesis, length_penalty: float) -> float:
    """score / length**alpha with the batched search's arithmetic (in the score's dtype)."""
    score = torch.as_tensor(hypothesis.score)
    length = torch.tensor(float(len(hypothesis.tokens)), dtype=score.dtype)
    return float(score / length**length_penalty)


def _until_eos(tokens: Sequence[int], eos_id: int) -> list[int]:
    """The ids before the first EOS (all of them when there is none)."""
    tokens = list(tokens)
    return tokens[: tokens.index(eos_id)] if eos_id in tokens else tokens


def _check_max_len(max_len: int) -> None:
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")


def _check_search(model: RegionalMMT, beam: int, max_len: int) -> None:
    _check_max_len(max_len)
    if not 1 <= beam <= model.shape.tgt_vocab - 2:
        raise ValueError(
            f"beam must be in 1..{model.shape.tgt_vocab - 2} (target vocabulary minus PAD/BOS), got {beam}"
        )
