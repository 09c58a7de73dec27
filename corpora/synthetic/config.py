"""``SyntheticConfig``: every knob of the synthetic dataset (the `generate` section of params.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.checks import check, check_range
from corpora.synthetic.inventory import MAX_OBJECTS

MIN_IMAGE_SIZE = 64  # below this the small shapes are a few pixels wide and their outlines merge


@dataclass(frozen=True)
class SplitCounts:
    """How many of something each split gets."""

    train: int
    val: int
    test: int

    def as_dict(self) -> dict[str, int]:
        return {"train": self.train, "val": self.val, "test": self.test}


@dataclass(frozen=True)
class ObjectRange:
    """Shapes per image, drawn uniformly from ``min`` to ``max``."""

    min: int = 1
    max: int = 4

    def __post_init__(self) -> None:
        check_range("min", self.min, 1, MAX_OBJECTS)
        check_range("max", self.max, self.min, MAX_OBJECTS)


@dataclass(frozen=True)
class FlickrLikeConfig:
    """A second, Flickr30K-like corpus of the same world: Karpathy split file, pivot-language captions only.

    The papers train the MMT on Multi30K and augment another corpus with it; this one has no translations,
    so only the MMT can give it captions in the target languages.

    Attributes:
        splits: Images per split; all 0 (the default) writes no second corpus.
        captions_per_image: Independent pivot-language captions per image (Flickr30K has 5).
        own_style: Its annotators are not the first corpus's (as MS-COCO's are not Multi30K's): they never say a
            slot's most common wording where there is another ("large", never "big"). False: the same annotators
            (Flickr30K is where Multi30K's images and English captions come from).
    """

    splits: SplitCounts = field(default_factory=lambda: SplitCounts(0, 0, 0))
    captions_per_image: int = 5
    own_style: bool = False

    @property
    def enabled(self) -> bool:
        return any(count > 0 for count in self.splits.as_dict().values())

    def __post_init__(self) -> None:
        for split, count in self.splits.as_dict().items():
            check_range(f"splits.{split}", count, 0, 10_000_000)
        # val or test images alone would leave a retrieval run on this corpus nothing to train on
        check(
            not self.enabled or self.splits.train >= 1,
            "splits.train",
            self.splits.train,
            "at least 1 when val or test > 0",
        )
        check_range("captions_per_image", self.captions_per_image, 1, 20)


@dataclass(frozen=True)
class NoiseConfig:
    """Shares of human comparable captions with one annotator mistake each (the translation captions have none)."""

    wrong_colour: float = 0.02
    missed_object: float = 0.02
    typo: float = 0.02

    def __post_init__(self) -> None:
        for name in ("wrong_colour", "missed_object", "typo"):
            check_range(name, getattr(self, name), 0.0, 1.0)
        total = self.wrong_colour + self.missed_object + self.typo
        check(total <= 1.0, "typo", self.typo, f"shares that sum to at most 1 (they sum to {total:g})")


@dataclass(frozen=True)
class SyntheticConfig:
    """What to generate. The defaults are a miniature Multi30K (1000/100/100 images) with WMT-like text.

    Attributes:
        image_size: Pixels per side.
        splits: Images per split.
        objects_per_image: Shapes per image.
        comparable_per_image: Multi30K task 2 style captions per image and language.
        parallel_pairs: Sentence pairs of the text-only corpus per language pair and split.
        flickr: The optional second corpus (same image size and objects per image), written to ``flickr/``.
        underspecified: Chance that a pivot-language human caption says a mention's colour or shape by its cover
            term ("a dark circle", "a red shape"), drawn for every mention where the image settles it; the
            translations name it exactly.
        paraphrase: Weight of every wording but the most frequent one (0: one wording per meaning; 1: the
            grammars' frequencies).
        uncommon: Chance that a comparable caption says an uncommon word ("crimson", "lozenge", "portrays") where
            its slot has one: the long tail of the human captions, which the translation captions lack. The parallel
            corpus says these words in its formal sentences.
        formal: Share of the parallel corpus's pairs in its formal register ("The picture depicts a scarlet rhombus
            beneath ..."), source and translation alike.
        noise: Annotator mistakes in the comparable and second-corpus captions.
        look_alike: Chance that an object after the first shares the shape or the colour of an earlier one
            (distractors that retrieval must tell apart).
        contrastive_items: Most contrastive items per target language, from the test split.
    """

    image_size: int = 224
    splits: SplitCounts = field(default_factory=lambda: SplitCounts(1000, 100, 100))
    objects_per_image: ObjectRange = field(default_factory=ObjectRange)
    comparable_per_image: int = 5
    parallel_pairs: SplitCounts = field(default_factory=lambda: SplitCounts(20000, 500, 500))
    flickr: FlickrLikeConfig = field(default_factory=FlickrLikeConfig)
    underspecified: float = 0.5
    paraphrase: float = 1.0
    uncommon: float = 0.0
    formal: float = 0.3
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    look_alike: float = 0.0
    contrastive_items: int = 500

    def __post_init__(self) -> None:
        check_range("underspecified", self.underspecified, 0.0, 1.0)
        check_range("paraphrase", self.paraphrase, 0.0, 10.0)
        check_range("uncommon", self.uncommon, 0.0, 0.5)
        check_range("formal", self.formal, 0.0, 1.0)
        check_range("look_alike", self.look_alike, 0.0, 1.0)
        check_range("contrastive_items", self.contrastive_items, 0, 1_000_000)
        check_range("image_size", self.image_size, MIN_IMAGE_SIZE, 4096)
        check_range("splits.train", self.splits.train, 1, 10_000_000)
        for split in ("val", "test"):
            check_range(f"splits.{split}", getattr(self.splits, split), 0, 10_000_000)
        for split, count in self.parallel_pairs.as_dict().items():
            check_range(f"parallel_pairs.{split}", count, 0, 100_000_000)
        check_range("comparable_per_image", self.comparable_per_image, 1, 20)
