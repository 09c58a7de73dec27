"""Regionally-attended multimodal NMT (Huang et al. 2020, section 3.1): ``MMTConfig``, ``MMTShape``, ``RegionalMMT``.

The source sentence x = [x_1..x_N] is paired with each of the K region features v_k of its image to form K
*multimodal threads* u_k = [v_k, x_1..x_N]. One shared Bi-LSTM encodes every thread into states s_{j,k},
j = 1..N+1. The LSTM decoder starts from the mean over threads of the last encoder states and attends with the
*factorized local attention* of Eq. 2-4:

    a_{ij|k} = softmax_j score(h_i, s_{j,k})          attention inside thread k (padded tokens masked)
    a_{ik}   = softmax_k score(h_i, mean_j s_{j,k})   attention over threads (padded regions masked)
    a_{ij}   = a_{ij|k} a_{ik},  c_i = sum_j sum_k a_{ij} s_{j,k}
    h~_i     = tanh(W_c [c_i; h_i])                    Eq. 1
    p(y_i | y_<i, x, v) = softmax(W_o h~_i)            Eq. 5

Text-only mode (``regions=None``, used for pre-training and as the text-only MT system) encodes ONE thread
u = [x_1..x_N] without the visual token; a_{ik} is then 1 and the model is a Luong-style attentive NMT.

Region context (``MMTConfig.region_context``, off by default, so the model is Eq. 1-5 as printed): the decoder also
attends over the projected regions z_k themselves and adds what it reads to Eq. 1,

    b_{ik} = softmax_k [c_i; h_i]^T W_g z_k,   r_i = sum_k b_{ik} z_k,   h~_i = tanh(W_c [c_i; h_i] + W_v r_i)

(the query is Eq. 1's own input: c_i tells which source words are being translated, so which object to look at),
with W_v starting at zero, so a pre-trained model fine-tuned with it starts as the model without it. Why: in Eq. 1-4
a region reaches the output only through the Bi-LSTM states of its thread, and after text-only pre-training the
decoder's attention sits on the aligned source word, where the forward LSTM keeps ~3% of the leading visual token;
fine-tuning then memorises the captions through the text faster than it learns to look (on the built-in world the
printed model's translations do not change with the image at all: docs/built-in-world.md, CHANGELOG.md).

Word grounding (``MMTConfig.word_grounding``, off by default): before the Bi-LSTM, every source word also reads
the regions its embedding points at,

    g_j = sum_k softmax_k (e_j^T W_u z_k) z_k,   x~_j = e_j + W_w g_j,   u_k = [z_k, x~_1..x~_N]

with W_w starting at zero. Why: the region context asks for an object once per generated word, from the decoder's
state; grounding asks from the source words ("circle" looks at the circles), and the Bi-LSTM carries what they read
to the words around them ("dark" in "a dark circle"), so the decoder's own attention on the aligned word brings the
image's answer. On the built-in world it raised the contrastive accuracy (measured in CHANGELOG.md, 0.1.0).

Choices the paper leaves open (nmtpytorch / Luong et al. 2015 conventions unless said otherwise):
- score(h, s) = h^T W s ("general" bilinear score, Luong 2015), one W for tokens and one for threads; the keys
  W s are computed once per sentence so a decoding step is two batched matrix products.
- "Last" encoder state of a thread: the forward direction at the thread's true last position (padding aside)
  and the backward direction at position 1 (where it ends), concatenated; the mean over valid threads goes
  through a linear layer + tanh to give every decoder layer's initial hidden state; initial cells are zero.
- Input feeding (Luong 2015): the decoder LSTM reads [embedding(y_{i-1}); h~_{i-1}], with h~_0 = 0.
- Dropout (one rate) on source/target embeddings and projected regions, on encoder states and on h~ before W_o.
- Region features are L2-normalised before their linear projection (nmtpytorch's recommendation).
- W_o has a bias; W_c and the attention matrices have none.
- Generation never emits PAD or BOS: :meth:`RegionalMMT.decode_step` masks them before the softmax.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from common.checks import check_fraction, check_range


@dataclass(frozen=True)
class MMTConfig:
    """The architecture of a :class:`RegionalMMT` (the `mmt.model` section of params.yaml).

    Attributes:
        emb_dim: Word embedding size; regions are projected to it too (nmtpytorch-like 256).
        hidden: LSTM size of the encoder (per direction) and of the decoder (nmtpytorch-like 512).
        dropout: Dropout rate on embeddings, encoder states and the attentional state.
        layers: LSTM layers of the encoder and of the decoder.
        region_context: Add the decoder's own attention over the projected regions to Eq. 1 (module docstring);
            False is the paper's model as printed.
        word_grounding: Add to each source word embedding what it reads from the regions, before the Bi-LSTM
            (module docstring); False is the paper's model as printed.
    """

    emb_dim: int = 256
    hidden: int = 512
    dropout: float = 0.3
    layers: int = 1
    region_context: bool = False
    word_grounding: bool = False

    def __post_init__(self) -> None:
        check_range("emb_dim", self.emb_dim, 4, 4096)
        check_range("hidden", self.hidden, 4, 8192)
        check_fraction("dropout", self.dropout, below_one=True)
        check_range("layers", self.layers, 1, 16)


@dataclass(frozen=True)
class MMTShape:
    """What the data fixes about a :class:`RegionalMMT`: vocabularies, region size, sentence length.

    Attributes:
        src_vocab: Source vocabulary size (ids 0..src_vocab-1).
        tgt_vocab: Target vocabulary size.
        region_dim: Size D of a region feature (2048 for bottom-up features, section 4.2).
        max_len: Longest sentence in tokens (the paper truncates at 100); also the decoding limit callers use.
        pad_id, unk_id, bos_id, eos_id: Special token ids, shared by both vocabularies.
    """

    src_vocab: int
    tgt_vocab: int
    region_dim: int = 2048
    max_len: int = 100
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3

    def __post_init__(self) -> None:
        sizes = {name: getattr(self, name) for name in ("src_vocab", "tgt_vocab", "region_dim", "max_len")}
        if min(sizes.values()) < 1:
            raise ValueError(f"MMTShape: sizes and max_len must be at least 1, got {self}")
        special = (self.pad_id, self.unk_id, self.bos_id, self.eos_id)
        if len(set(special)) != 4 or min(special) < 0 or max(special) >= min(self.src_vocab, self.tgt_vocab):
            raise ValueError(f"MMTShape: special ids {special} must be distinct and inside both vocabularies")


@dataclass(frozen=True)
class SourceBatch:
    """The encoder input of B sentences.

    Attributes:
        src: (B, N) int64 source ids, right-padded with PAD.
        regions: (B, K, D) region features (any float dtype), or None for text-only.
        region_mask: (B, K) bool, True for valid regions; None for text-only.
    """

    src: torch.Tensor
    regions: torch.Tensor | None = None
    region_mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.src.size(0)


def pad_ids(sequences: Sequence[Sequence[int]], *, pad_id: int, device: torch.device) -> torch.Tensor:
    """(B, max length) int64 tensor of ``sequences``, right-padded with ``pad_id``."""
    width = max((len(ids) for ids in sequences), default=0)
    padded = np.full((len(sequences), width), pad_id, dtype=np.int64)
    for row, ids in enumerate(sequences):
        padded[row, : len(ids)] = ids
    return torch.from_numpy(padded).to(device)


def source_batch(
    src_ids: Sequence[Sequence[int]],
    *,
    pad_id: int,
    device: torch.device,
    regions: np.ndarray | torch.Tensor | None = None,
    region_mask: np.ndarray | torch.Tensor | None = None,
) -> SourceBatch:
    """Pad ``src_ids`` and move everything to ``device`` (regions keep their dtype, e.g. float16)."""
    if (regions is None) != (region_mask is None):
        raise ValueError("regions and region_mask go together: give both or neither")
    src = pad_ids(src_ids, pad_id=pad_id, device=device)
    if regions is None or region_mask is None:
        return SourceBatch(src)
    return SourceBatch(src, torch.as_tensor(regions).to(device), torch.as_tensor(region_mask).to(device))


@dataclass(frozen=True)
class Encoded:
    """Encoder output reused by every decoding step (B sentences, K threads, T = thread length).

    Attributes:
        states: (B, K, T, 2H) s_{j,k}; zeros on padded tokens and padded threads.
        token_keys: (B, K, T, H) W_a s_{j,k}, the keys of a_{ij|k}.
        thread_keys: (B, K, H) W_r mean_j s_{j,k}, the keys of a_{ik}.
        token_mask: (B, T) bool, True for the valid positions (the same in every thread of a sentence).
        thread_mask: (B, K) bool, True for valid threads (all True in text-only mode, where K = 1).
        init: (L, B, H) initial decoder hidden state of each layer.
        regions: (B, K, E) the projected regions z_k, zeros in padding; None in text-only mode or without
            ``MMTConfig.region_context``.
        region_keys: (B, K, 3H) W_g z_k, the keys of b_{ik}; None with ``regions``.
    """

    states: torch.Tensor
    token_keys: torch.Tensor
    thread_keys: torch.Tensor
    token_mask: torch.Tensor
    thread_mask: torch.Tensor
    init: torch.Tensor
    regions: torch.Tensor | None = None
    region_keys: torch.Tensor | None = None


@dataclass(frozen=True)
class DecoderState:
    """Recurrent decoder state of R rows (R = B x rows per sentence, sentence-major).

    Attributes:
        hidden: (L, R, H) LSTM hidden states h_i per layer.
        cell: (L, R, H) LSTM cells per layer.
        feed: (R, H) the previous attentional state h~_{i-1} (input feeding).
    """

    hidden: torch.Tensor
    cell: torch.Tensor
    feed: torch.Tensor

    def select(self, rows: torch.Tensor) -> DecoderState:
        """The state of ``rows`` (R',) int64, in that order (beam search reorders hypotheses with it)."""
        return DecoderState(self.hidden[:, rows], self.cell[:, rows], self.feed[rows])


class RegionalMMT(nn.Module):
    """Bi-LSTM encoder over K multimodal threads + LSTM decoder with factorized local attention (section 3.1)."""

    def __init__(self, config: MMTConfig, shape: MMTShape) -> None:
        super().__init__()
        self.config, self.shape = config, shape
        emb, hidden, layers = config.emb_dim, config.hidden, config.layers
        self.src_embedding = nn.Embedding(shape.src_vocab, emb, padding_idx=shape.pad_id)
        self.tgt_embedding = nn.Embedding(shape.tgt_vocab, emb, padding_idx=shape.pad_id)
        self.region_proj = nn.Linear(shape.region_dim, emb)  # v_k -> word-embedding space
        self.encoder = nn.LSTM(
            emb, hidden, num_layers=layers, bidirectional=True, batch_first=True, dropout=config.dropout * (layers > 1)
        )
        self.init_proj = nn.Linear(2 * hidden, layers * hidden)  # mean of last states -> decoder h_0
        self.decoder = nn.ModuleList(
            [nn.LSTMCell(emb + hidden if layer == 0 else hidden, hidden) for layer in range(layers)]
        )
        self.token_att = nn.Linear(2 * hidden, hidden, bias=False)  # W_a of score(h_i, s_{j,k})
        self.thread_att = nn.Linear(2 * hidden, hidden, bias=False)  # W_r of score(h_i, mean_j s_{j,k})
        self.combine = nn.Linear(2 * hidden + hidden, hidden, bias=False)  # W_c of Eq. 1
        self.output = nn.Linear(hidden, shape.tgt_vocab)  # W_o of Eq. 5
        if config.region_context:
            self.region_att = nn.Linear(emb, 3 * hidden, bias=False)  # W_g of b_{ik}, queried with [c_i; h_i]
            self.region_combine = nn.Linear(emb, hidden, bias=False)  # W_v: r_i into Eq. 1
            nn.init.zeros_(self.region_combine.weight)  # no effect until fine-tuning finds a use for the regions
        if config.word_grounding:
            self.region_ground = nn.Linear(emb, emb, bias=False)  # W_u of the words' scores e_j^T W_u z_k
            self.region_ground_out = nn.Linear(emb, emb, bias=False)  # W_w: g_j into the word's embedding
            nn.init.zeros_(self.region_ground_out.weight)  # the pre-trained encoder's input until fine-tuning
        self.dropout = nn.Dropout(config.dropout)
        banned = torch.zeros(shape.tgt_vocab, dtype=torch.bool)
        banned[[shape.pad_id, shape.bos_id]] = True  # never generated
        self.banned: torch.Tensor
        self.register_buffer("banned", banned, persistent=False)  # not in checkpoints: it follows from the config

    def encode(self, batch: SourceBatch) -> Encoded:
        """Encode the K threads of every sentence (one thread without visual token in text-only mode).

        Args:
            batch: src (B, N) right-padded ids; regions (B, K, D) and region_mask (B, K), or both None.

        Returns:
            The :class:`Encoded` structure the decoder attends to, with T = N + 1 (regional) or N (text-only).

        Raises:
            ValueError: an empty sentence in text-only mode, or an image without any valid region.
        """
        src, pad = batch.src, self.shape.pad_id
        lengths = (src != pad).sum(dim=1)  # (B,) true sentence lengths; PAD only at the end
        words = self.dropout(self.src_embedding(src))  # (B, N, E)
        visual: torch.Tensor | None = None
        if batch.regions is None or batch.region_mask is None:
            if bool((lengths == 0).any()):
                raise ValueError("text-only MMT cannot encode an empty source sentence")
            threads = words[:, None]  # (B, 1, N, E)
            thread_mask = torch.ones(src.size(0), 1, dtype=torch.bool, device=src.device)
        else:
            thread_mask = batch.region_mask.to(torch.bool)
            if not bool(thread_mask.any(dim=1).all()):
                raise ValueError("every image needs at least one valid region (region_mask all False in a row)")
            # nmtpytorch (Caglayan et al. 2018): L2-normalise each region feature before projecting it.
            regions = F.normalize(batch.regions.to(self.region_proj.weight.dtype), dim=-1)
            visual = self.dropout(self.region_proj(regions))  # (B, K, E)
            if self.config.word_grounding:
                words = words + self.region_ground_out(self.ground_words(words, visual, thread_mask))
            count = thread_mask.size(1)
            text = words[:, None].expand(-1, count, -1, -1)  # (B, K, N, E)
            threads = torch.cat([visual[:, :, None].to(text.dtype), text], dim=2)  # (B, K, N+1, E)
            lengths = lengths + 1
        states = self._run_threads(threads, lengths, thread_mask)  # (B, K, T, 2H)
        token_mask = torch.arange(states.size(2), device=src.device) < lengths[:, None]  # (B, T)
        encoded = self._encoded(states, token_mask, thread_mask, lengths)
        if visual is None or not self.config.region_context:
            return encoded
        regions = visual.to(states.dtype) * thread_mask[..., None].to(states.dtype)  # (B, K, E) z_k, zeros in padding
        return dataclasses.replace(encoded, regions=regions, region_keys=self.region_att(regions))

    def ground_words(self, words: torch.Tensor, visual: torch.Tensor, thread_mask: torch.Tensor) -> torch.Tensor:
        """g_j = sum_k softmax_k (e_j^T W_u z_k) z_k over the valid regions.

        Args:
            words: (B, N, E) source word embeddings e_j.
            visual: (B, K, E) projected regions z_k.
            thread_mask: (B, K) valid regions.

        Returns:
            (B, N, E) what each word reads from the regions (padded words read too; the Bi-LSTM never sees them).
        """
        visual = visual.to(words.dtype)
        read, _ = _read_regions(torch.bmm(self.region_ground(words), visual.transpose(1, 2)), thread_mask, visual)
        return read

    def _run_threads(self, threads: torch.Tensor, lengths: torch.Tensor, thread_mask: torch.Tensor) -> torch.Tensor:
        """(B, K, T, 2H) Bi-LSTM states of the valid threads (packed: padding never enters), zeros elsewhere."""
        batch, count, width, emb = threads.shape
        valid = thread_mask.reshape(-1)  # (B*K,)
        flat = threads.reshape(batch * count, width, emb)[valid]  # (V, T, E) valid threads only
        flat_lengths = lengths.repeat_interleave(count)[valid].cpu()  # pack_padded_sequence wants CPU lengths
        packed = pack_padded_sequence(flat, flat_lengths, batch_first=True, enforce_sorted=False)
        output, _ = self.encoder(packed)
        encoded, _ = pad_packed_sequence(output, batch_first=True, total_length=width)  # (V, T, 2H), zeros in padding
        states = encoded.new_zeros(batch * count, width, encoded.size(-1))
        states[valid] = encoded
        return self.dropout(states.view(batch, count, width, -1))  # (B, K, T, 2H)

    def _encoded(
        self, states: torch.Tensor, token_mask: torch.Tensor, thread_mask: torch.Tensor, lengths: torch.Tensor
    ) -> Encoded:
        """Attention keys and the initial decoder state from the thread states."""
        batch, count, _, both = states.shape
        hidden = both // 2
        last = (lengths - 1).view(batch, 1, 1, 1).expand(-1, count, 1, hidden)  # (B, K, 1, H)
        forward_last = states[..., :hidden].gather(2, last).squeeze(2)  # (B, K, H) at each thread's last token
        backward_first = states[:, :, 0, hidden:]  # (B, K, H) the backward LSTM ends at position 1
        weights = thread_mask.to(states.dtype)[..., None]  # (B, K, 1)
        final = (torch.cat([forward_last, backward_first], dim=-1) * weights).sum(1) / weights.sum(1)  # (B, 2H)
        init = torch.tanh(self.init_proj(final)).view(batch, self.config.layers, hidden).transpose(0, 1)  # (L, B, H)
        thread_means = states.sum(dim=2) / lengths.view(batch, 1, 1).to(states.dtype)  # (B, K, 2H)
        return Encoded(
            states=states,
            token_keys=self.token_att(states),
            thread_keys=self.thread_att(thread_means),
            token_mask=token_mask,
            thread_mask=thread_mask,
            init=init.contiguous(),
        )

    def attend(self, encoded: Encoded, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Factorized local attention (Eq. 2-4) of R decoder states per sentence.

        Args:
            encoded: B sentences.
            query: (B, R, H) decoder states h_i (R = 1 in training, the beam size in beam search).

        Returns:
            context: (B, R, 2H) c_i.
            weights: (B, R, K, T) a_{ij} = a_{ij|k} a_{ik}; sums to 1 over (k, j), 0 on padding.
        """
        batch, count, width, hidden = encoded.token_keys.shape
        rows = query.size(1)
        keys = encoded.token_keys.reshape(batch, count * width, hidden)  # (B, K*T, H)
        token_scores = torch.bmm(query, keys.transpose(1, 2)).view(batch, rows, count, width)  # (B, R, K, T)
        token_scores = token_scores.masked_fill(~encoded.token_mask[:, None, None, :], float("-inf"))
        in_thread = torch.softmax(_at_least_float32(token_scores), dim=-1)  # a_{ij|k}
        thread_scores = torch.bmm(query, encoded.thread_keys.transpose(1, 2))  # (B, R, K)
        thread_scores = thread_scores.masked_fill(~encoded.thread_mask[:, None, :], float("-inf"))
        over_threads = torch.softmax(_at_least_float32(thread_scores), dim=-1)  # a_{ik}
        weights = (in_thread * over_threads[..., None]).to(query.dtype)  # (B, R, K, T) a_{ij}
        states = encoded.states.reshape(batch, count * width, -1)  # (B, K*T, 2H)
        context = torch.bmm(weights.view(batch, rows, count * width), states.to(query.dtype))  # (B, R, 2H)
        return context, weights

    def attend_regions(self, encoded: Encoded, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The region context: b_{ik} = softmax_k [c_i; h_i]^T W_g z_k over the valid regions, r_i = sum_k b_{ik} z_k.

        Args:
            encoded: B sentences encoded with ``MMTConfig.region_context`` and regions.
            query: (B, R, 3H) [c_i; h_i]: the attended context and the decoder state.

        Returns:
            read: (B, R, E) r_i.
            weights: (B, R, K) b_{ik}; sums to 1 over k, 0 on padded regions.
        """
        if encoded.regions is None or encoded.region_keys is None:
            raise ValueError("attend_regions needs regions encoded with MMTConfig.region_context")
        scores = torch.bmm(query, encoded.region_keys.transpose(1, 2))  # (B, R, K)
        return _read_regions(scores, encoded.thread_mask, encoded.regions.to(query.dtype))

    def initial_state(self, encoded: Encoded, rows_per_sentence: int = 1) -> DecoderState:
        """Decoder state before the first target token, repeated ``rows_per_sentence`` times per sentence."""
        hidden = encoded.init.repeat_interleave(rows_per_sentence, dim=1)  # (L, B*R, H)
        return DecoderState(hidden, torch.zeros_like(hidden), hidden.new_zeros(hidden.shape[1:]))

    def step(self, encoded: Encoded, previous: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, DecoderState]:
        """One decoder step of B x R rows: logits of y_i given y_{i-1} (search; training runs :meth:`forward`).

        Args:
            encoded: B sentences.
            previous: (B*R,) int64 previous target tokens y_{i-1} (BOS first), sentence-major rows.
            state: The rows' decoder state.

        Returns:
            logits: (B*R, V_tgt) unnormalised scores W_o h~_i.
            state: The updated state.
        """
        state = self.recur(encoded, self.dropout(self.tgt_embedding(previous)), state)
        return self.project(state.feed), state

    def recur(self, encoded: Encoded, embedded: torch.Tensor, state: DecoderState) -> DecoderState:
        """The recurrence of one decoder step: the LSTM layers, the attention and Eq. 1's h~_i (the new ``feed``).

        Args:
            encoded: B sentences.
            embedded: (B*R, E) the embeddings of y_{i-1}, dropout applied.
            state: The rows' decoder state.
        """
        layer_input = torch.cat([embedded, state.feed], dim=-1)  # (B*R, E+H)
        hiddens, cells = [], []
        for layer, cell in enumerate(self.decoder):
            hidden, memory = cell(layer_input, (state.hidden[layer], state.cell[layer]))
            hiddens.append(hidden)
            cells.append(memory)
            layer_input = self.dropout(hidden)
        batch = encoded.states.size(0)
        top = hiddens[-1]  # (B*R, H) h_i
        query = top.view(batch, -1, top.size(-1))  # (B, R, H)
        context, _ = self.attend(encoded, query)  # (B, R, 2H)
        combined = self.combine(torch.cat([context.reshape(top.size(0), -1), top], dim=-1))  # W_c [c_i; h_i]
        if encoded.regions is not None:
            read, _ = self.attend_regions(encoded, torch.cat([context, query], dim=-1))  # (B, R, E) r_i
            combined = combined + self.region_combine(read.reshape(top.size(0), -1))
        attentional = torch.tanh(combined)  # h~_i, Eq. 1
        return DecoderState(torch.stack(hiddens), torch.stack(cells), attentional)

    def project(self, attentional: torch.Tensor) -> torch.Tensor:
        """Eq. 5's logits W_o h~ of attentional states (..., H), dropout applied first."""
        return self.output(self.dropout(attentional))

    def decode_step(
        self, encoded: Encoded, previous: torch.Tensor, state: DecoderState
    ) -> tuple[torch.Tensor, DecoderState]:
        """One generation step: log-probabilities (float32, or float64 for a float64 model), PAD and BOS at -inf.

        Args:
            encoded, previous, state: As for :meth:`step`.

        Returns:
            log_probs: (B*R, V_tgt) log p(y_i | y_<i, x, v), renormalised over the tokens that may be generated.
            state: The updated state.
        """
        logits, state = self.step(encoded, previous, state)
        logits = _at_least_float32(logits).masked_fill(self.banned, float("-inf"))
        return torch.log_softmax(logits, dim=-1), state

    def forward(self, batch: SourceBatch, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits.

        Only the recurrence runs position by position: the target embeddings before it and the output layer after it
        run once over all M positions, so their gradients are one matrix product each instead of M partial ones
        summed into vocabulary-sized buffers.

        Args:
            batch: B source sentences (and regions).
            tgt_in: (B, M) int64 decoder inputs: BOS followed by the target without its last token.

        Returns:
            (B, M, V_tgt) logits of y_1..y_M.
        """
        encoded = self.encode(batch)
        state = self.initial_state(encoded)
        embedded = self.dropout(self.tgt_embedding(tgt_in))  # (B, M, E)
        attentional = []
        for position in range(tgt_in.size(1)):
            state = self.recur(encoded, embedded[:, position], state)
            attentional.append(state.feed)
        return self.project(torch.stack(attentional, dim=1))  # (B, M, V)


def _read_regions(
    scores: torch.Tensor, region_mask: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, Q, E) what Q queries read from the regions and (B, Q, K) their weights: the softmax over the valid regions
    of ``scores`` (B, Q, K), applied to ``values`` (B, K, E); padded regions (``region_mask`` (B, K) False) get 0."""
    scores = scores.masked_fill(~region_mask[:, None, :], float("-inf"))
    weights = torch.softmax(_at_least_float32(scores), dim=-1).to(values.dtype)
    return torch.bmm(weights, values), weights


def _at_least_float32(scores: torch.Tensor) -> torch.Tensor:
    """Softmax inputs in float32 under fp16/bf16 autocast; float32 and float64 stay as they are."""
    return scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
