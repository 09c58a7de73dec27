"""The root configs of the corpora's params sections: ``PrepareConfig`` (`prepare`) and ``ExportConfig`` (`export`).

The `generate` section is :class:`~corpora.synthetic.config.SyntheticConfig`, the `languages` table
:class:`~corpora.languages.Languages`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.checks import check
from common.text_input import TextConfig
from corpora.adapters import ADAPTERS
from corpora.hf_captions import HfConfig
from corpora.karpathy import KarpathyConfig
from corpora.multi30k import Multi30kConfig
from corpora.scan_captions import ScanCaptionsConfig
from corpora.wmt import ParallelConfig


@dataclass(frozen=True)
class PrepareConfig:
    """The `prepare` section of params.yaml: every adapter's settings, shared by the corpora read with it.

    Attributes:
        read_image_sizes: Open every image header for width/height (false: text-only, sizes null).
        images_outside_root: Image paths from the data files (and symbolic links in the image folder) may lead out
            of the corpus's image folder; false refuses them naming the file and line. Read by every stage that
            opens images (prepare, features, export, report).
        multi30k: Settings of the multi30k adapter.
        karpathy: Settings of the karpathy adapter.
        scan: Settings of the scan adapter.
        hf: Settings of the hf adapter (Hugging Face datasets).
        parallel: The text-only parallel corpus (MT pre-training).
        text: How captions and parallel sentences are cleaned (control characters refused or removed).
    """

    read_image_sizes: bool = True
    images_outside_root: bool = False
    multi30k: Multi30kConfig = field(default_factory=Multi30kConfig)
    karpathy: KarpathyConfig = field(default_factory=KarpathyConfig)
    scan: ScanCaptionsConfig = field(default_factory=ScanCaptionsConfig)
    hf: HfConfig = field(default_factory=HfConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    text: TextConfig = field(default_factory=TextConfig)

    def adapter_config(self, format: str) -> object:
        """The settings of the adapter ``format`` (a name of :data:`~corpora.adapters.ADAPTERS`)."""
        if format not in ADAPTERS:
            raise ValueError(f"unknown dataset format {format!r}; known: {', '.join(ADAPTERS)}")
        return getattr(self, format)


@dataclass(frozen=True)
class ExportConfig:
    """The `export` section of params.yaml: which caption variants become Hugging Face dataset folders.

    Attributes:
        variants: Variant names (each one of retrieval.variants, the variants `augment` builds); empty: all of them.
        images: Embed each caption's image file (a ``datasets.Image`` column; the folder grows by the image bytes
            times the captions per image).
        regions: Add each caption's image's region features from the target corpus's FeatureStore (``regions``,
            ``region_boxes``, ``num_regions``; K x D x 2 bytes per caption).
    """

    variants: tuple[str, ...] = ()
    images: bool = False
    regions: bool = False

    def __post_init__(self) -> None:
        for index, name in enumerate(self.variants):
            check(name not in self.variants[:index], f"variants[{index}]", name, "each variant once")
