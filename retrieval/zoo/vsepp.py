"""VSE++ (Faghri et al., BMVC 2018): a GRU caption encoder and a linear image projection, scored by cosine.

Text: word embeddings -> unidirectional GRU -> the state at the last real token -> l2norm. Image: a linear
projection (Xavier-uniform weights, zero bias) -> l2norm. What makes it "++" is the loss, the hardest negative
per positive pair (``max_violation``), which the trainer applies to :meth:`RetrievalModel.similarity`.

Deviations: the original projects one global CNN vector per image; our images are K detector regions, so the
projection is applied to their masked mean. The joint space has ``hidden`` = 512 dimensions like every model
of this project (the original: 1024).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from common.checks import check_positive
from retrieval.encoders import TextEncoder, l2norm, masked_mean
from retrieval.model import Embedded, ImageBatch, RetrievalModel, TextBatch


@dataclass(frozen=True)
class VSEPPConfig:
    """Attributes:
    word_dim: Word vector size (300 in VSE++).
    hidden: GRU state size = joint embedding size.
    """

    word_dim: int = 300
    hidden: int = 512

    def __post_init__(self) -> None:
        check_positive("word_dim", self.word_dim)
        check_positive("hidden", self.hidden)


def last_state(states: Tensor, lengths: Tensor) -> Tensor:
    """(B, L, d) states and (B,) lengths -> (B, d) state at position length - 1 of each row."""
    index = (lengths - 1).to(states.device).view(-1, 1, 1).expand(-1, 1, states.shape[-1])  # (B, 1, d)
    return states.gather(1, index).squeeze(1)


class VSEPP(RetrievalModel):
    name = "vsepp"
    default_loss = "max_violation"

    def __init__(self, config: VSEPPConfig, *, vocab_size: int, languages: int, region_dim: int) -> None:
        super().__init__()
        self.config = config
        self.text_encoder = TextEncoder(vocab_size, config.word_dim, config.hidden, rnn="gru", bidirectional=False)
        self.image_projection = nn.Linear(region_dim, config.hidden)
        nn.init.xavier_uniform_(self.image_projection.weight)
        nn.init.zeros_(self.image_projection.bias)

    def encode_images(self, images: ImageBatch) -> Embedded:
        """(B, K, D) regions -> Embedded((B, hidden)) unit vectors."""
        return Embedded(l2norm(self.image_projection(masked_mean(images.regions, images.mask))))

    def encode_texts(self, texts: TextBatch) -> Embedded:
        """(B, L) tokens -> Embedded((B, hidden)) unit vectors."""
        states, _ = self.text_encoder(texts.tokens, texts.lengths, texts.host_lengths)
        return Embedded(l2norm(last_state(states, texts.lengths)))
