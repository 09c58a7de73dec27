"""Every retrieval model by name: one row per model (its config dataclass and its module class).

Add a model: write ``retrieval/zoo/<name>.py`` (config dataclass + :class:`~retrieval.model.RetrievalModel`
subclass) and add its row here; params.yaml then selects it by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.config import build
from retrieval.model import RetrievalModel
from retrieval.zoo.dan import DAN, DANConfig
from retrieval.zoo.mule import MULE, MULEConfig
from retrieval.zoo.multihead import MultiHeadConfig, MultiHeadDiversity
from retrieval.zoo.parallel_embn import ParallelEmbN, ParallelEmbNConfig
from retrieval.zoo.san import SAN, SANConfig
from retrieval.zoo.scan import SCAN, SCANConfig
from retrieval.zoo.scan_fusion import SCANFusion, SCANFusionConfig
from retrieval.zoo.vsepp import VSEPP, VSEPPConfig


@dataclass(frozen=True)
class ModelEntry:
    config_type: type
    model_type: type[RetrievalModel]


MODELS: dict[str, ModelEntry] = {
    "san": ModelEntry(SANConfig, SAN),  # Huang et al. 2020, Eq. 7
    "dan": ModelEntry(DANConfig, DAN),  # m-DAN with region features ("DAN*")
    "scan": ModelEntry(SCANConfig, SCAN),  # stacked cross attention, t2i/i2t
    "mule": ModelEntry(MULEConfig, MULE),  # universal multilingual embedding
    "parallel_embn": ModelEntry(ParallelEmbNConfig, ParallelEmbN),  # separate language branches
    "vsepp": ModelEntry(VSEPPConfig, VSEPP),  # GRU + max-violation
    "multihead": ModelEntry(MultiHeadConfig, MultiHeadDiversity),  # Huang et al. 2019
    "scan_fusion": ModelEntry(SCANFusionConfig, SCANFusion),  # SCAN t2i + i2t, scores averaged (Table 2)
}


class UnknownModelError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def model_entry(name: str) -> ModelEntry:
    """The row of ``name``; :class:`UnknownModelError` lists the known names."""
    if name not in MODELS:
        raise UnknownModelError(f"unknown retrieval model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def make_config(name: str, values: Mapping[str, Any], *, path: str = "") -> Any:
    """The config dataclass of model ``name`` from ``values`` (missing fields keep their defaults).

    Raises:
        UnknownModelError: an unknown model name.
        SettingError: a field the config does not have (the known ones are listed), or a bad value; its key
            is prefixed with ``path``.
    """
    return build(model_entry(name).config_type, dict(values), path)


def build_model(name: str, config: Any, *, vocab_size: int, languages: int, region_dim: int) -> RetrievalModel:
    """A freshly initialised model ``name`` with ``config`` (its config dataclass)."""
    entry = model_entry(name)
    if not isinstance(config, entry.config_type):
        raise TypeError(f"{name} takes a {entry.config_type.__name__}, got {type(config).__name__}")
    return entry.model_type(config, vocab_size=vocab_size, languages=languages, region_dim=region_dim)
