"""The dataset card of an exported variant: huggingface_hub parses it and reads the front matter the Hub and
`load_dataset` need; it has every section of the Hub's dataset card template; what it says is true of the variant (the
system that translated its captions, the source corpus's license, terms and citations); every column the export writes
is documented and the template ships with the package."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import DatasetCard, RepoCard

from corpora.card_sources import COCO_TERMS, ELLIOTT2016, FLICKR30K_PAGE, HUANG2020, LIN2014, MMTR, YOUNG2014
from corpora.dataset_card import COLUMN_DOCS, TEMPLATE, CardInfo, Translation, dataset_card
from corpora.hf_dataset import PROVENANCE, TEXT_COLUMNS, export_variant
from tests.unit.corpora.test_hf_dataset import CARD, caption_rows, captions_of, images_of, region_store

REPO = Path(__file__).resolve().parents[3]
MMT = Translation(
    origin="mmt",
    mt_backend="text-only",
    held={},
    as_is=False,
    extractor="butd",
    finetune_corpus="multi30k",
    beam=5,
    kinds=("comparable",),
)
ROWS = {"train": {"de": 3, "en": 2}, "validation": {"de": 1, "en": 1}}
COLUMNS = (*TEXT_COLUMNS, *PROVENANCE, "image_path")


def origins(system: str | None) -> list[dict[str, Any]]:
    """The provenance rows of ROWS: human captions, and one train caption by ``system`` (en -> de) if given."""
    human = [
        {"split": "train", "lang": "de", "origin": "human", "system": None, "hop": 0, "caption_id_count": 2},
        {"split": "train", "lang": "en", "origin": "human", "system": None, "hop": 0, "caption_id_count": 2},
        {"split": "validation", "lang": "de", "origin": "human", "system": None, "hop": 0, "caption_id_count": 1},
        {"split": "validation", "lang": "en", "origin": "human", "system": None, "hop": 0, "caption_id_count": 1},
    ]
    if system is None:
        return human
    origin = system.split("-")[0]
    return [
        *human,
        {"split": "train", "lang": "de", "origin": origin, "system": system, "hop": 1, "caption_id_count": 1},
    ]


def render(card: CardInfo, *, columns: tuple[str, ...] = COLUMNS) -> str:
    system = None if card.translation is None else f"{card.translation.origin}-en-de"
    return dataset_card(card, ROWS, origins(system), columns, None, data_dir="data", disk_dir="hf")


def real(dataset: str, translation: Translation | None = MMT) -> CardInfo:
    return replace(CARD, corpus="target", dataset=dataset, generated=False, translation=translation)


def section(text: str, header: str) -> str:
    """The text under ``header`` (a whole line) up to the next header of any level."""
    start = text.index(f"\n{header}\n") + len(header) + 2
    following = re.search(r"^#{1,6} ", text[start:], flags=re.MULTILINE)
    return text[start : start + following.start()] if following else text[start:]


@pytest.fixture(scope="module")
def exported_card(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The README.md of the toy variant (generated data, MMT captions) exported with images and regions."""
    root = tmp_path_factory.mktemp("card")
    images = images_of(root / "images")
    export_variant(
        captions_of(images),
        images,
        root / "mmt_fb",
        card=replace(CARD, translation=MMT),
        image_root=root / "images",
        with_images=True,
        regions=region_store(root / "store"),
    )
    return (root / "mmt_fb" / "README.md").read_text(encoding="utf-8")


def test_huggingface_hub_reads_the_front_matter(exported_card: str) -> None:
    card = DatasetCard(exported_card)
    assert RepoCard(exported_card).data.to_dict() == card.data.to_dict()
    assert card.data.language == ["de", "en"] and card.data.multilinguality == "multilingual"
    assert card.data.license == "mit" and "license_name" not in card.data.to_dict()
    assert card.data.size_categories == ["n<1K"] and card.data.task_categories == ["image-to-text", "text-to-image"]
    assert card.data.pretty_name == "mmtr toy: caption variant mmt_fb"
    assert card.data.tags == [
        "image-text-retrieval",
        "machine-translation",
        "synthetic-captions",
        "multimodal-machine-translation",
        "synthetic",
    ]
    assert card.data.configs == [
        {
            "config_name": "default",
            "data_files": [
                {"split": name, "path": f"data/{name}-*.parquet"} for name in ("train", "validation", "test")
            ],
        }
    ]
    assert str(card) == exported_card  # parsing and writing it back changes nothing


def test_the_card_has_every_section_of_the_hub_template(exported_card: str) -> None:
    body = Path(DatasetCard.default_template_path).read_text(encoding="utf-8").split("\n---\n", 1)[1]
    headers = [line.removesuffix(" [optional]") for line in body.splitlines() if re.match(r"#{1,6} ", line)]
    assert headers[0].startswith("# Dataset Card for ") and {"## Uses", "## Citation", "### Recommendations"} < set(
        headers
    )
    ours = exported_card.splitlines()
    assert f"# Dataset Card for {DatasetCard(exported_card).data.pretty_name}" in ours
    assert [header for header in headers[1:] if header not in ours] == []
    assert "[More Information Needed]" not in exported_card and not re.search(r"\{\{ |\{%", exported_card)


def test_the_body_says_how_the_variant_was_made(exported_card: str) -> None:
    assert "Variant `mmt_fb`: MMT(f+b)" in exported_card and '| `mmt.targets` | `["de"]` |' in exported_card
    assert "| train | de | mmt | mmt-en-de | 1 | 2 |" in exported_card
    assert "| validation | 1 | 1 | 2 |" in exported_card  # rows per split and language (de, en, all)
    assert "this variant holds hops 1, 2. They are in the train split;" in exported_card
    who = section(exported_card, "#### Who are the annotators?")
    assert who.strip().startswith("No people: the systems `mmt-de-en`, `mmt-en-de`")
    assert "`region_boxes`" in exported_card and "Region features from the feature store `store`" in exported_card


def test_a_generated_corpus_is_mit_licensed_and_cites_the_method_and_the_project() -> None:
    text = render(replace(CARD, translation=MMT))
    assert DatasetCard(text).data.license == "mit"
    assert "the MIT License (SPDX `MIT`, [https://spdx.org/licenses/MIT.html]" in section(text, "## License")
    citations = section(text, "## Citation")
    assert HUANG2020 in citations and MMTR in citations and "@article" not in citations and "COCO" not in citations
    assert "None: the images are drawn shapes" in text and "Do not publish this folder" not in text


@pytest.mark.parametrize(
    ("dataset", "license_name", "link", "cited"),
    [
        ("flickr30k", "flickr30k-terms", FLICKR30K_PAGE, (YOUNG2014,)),
        ("multi30k", "multi30k-terms", "https://github.com/multi30k/dataset", (ELLIOTT2016, YOUNG2014)),
        ("coco", "coco-terms-of-use", COCO_TERMS, (LIN2014,)),
    ],
)
def test_a_real_corpus_card_links_its_terms_and_cites_it(
    dataset: str, license_name: str, link: str, cited: tuple[str, ...]
) -> None:
    text = render(real(dataset))
    data = DatasetCard(text).data.to_dict()
    assert (data["license"], data["license_name"], data["license_link"]) == ("other", license_name, link)
    assert "synthetic" not in data["tags"] and "multimodal-machine-translation" in data["tags"]
    assert f"]({link})" in section(text, "## License") and "bound by the same terms" in text
    citations = section(text, "## Citation")
    assert all(entry in citations for entry in (HUANG2020, MMTR, *cited))
    others = {YOUNG2014, ELLIOTT2016, LIN2014} - set(cited)
    assert not any(entry in citations for entry in others)
    assert "The images are photographs from Flickr" in section(text, "#### Personal and Sensitive Information")


def test_coco_terms_name_both_licenses() -> None:
    terms = section(render(real("coco")), "## License")
    assert "Creative Commons Attribution 4.0" in terms and "Flickr Terms of Use" in terms


def test_an_unknown_corpus_names_no_license_and_asks_for_a_check() -> None:
    text = render(real("my_captions"))
    data = DatasetCard(text).data.to_dict()
    assert (data["license"], data["license_name"]) == ("other", "my_captions-license") and "license_link" not in data
    assert "which this card cannot name: check them before you share" in text
    assert section(text, "## Citation").count("@") == 2  # the method and the project, no corpus


def test_embedded_images_of_a_real_corpus_are_not_to_be_published() -> None:
    warning = "Do not publish this folder: it embeds images whose terms forbid redistribution."
    assert warning in render(real("flickr30k"), columns=(*COLUMNS, "image"))
    assert warning not in render(real("flickr30k"))


def test_an_mmt_variant_names_the_multimodal_system() -> None:
    text = render(replace(CARD, translation=MMT))
    process = section(text, "#### Annotation process")
    assert "mmtr's regional multimodal NMT (`RegionalMMT`" in process and "(extractor `butd`)" in process
    assert "translation captions of the corpus `multi30k`" in process and "text-only" in process  # pre-training
    risks = section(text, "## Bias, Risks, and Limitations")
    assert "hallucinated object" in risks and "**No image.**" not in risks
    assert "| `features.extractor` |" not in text  # CARD's own settings table: flows/export.py adds these


def test_a_text_only_mt_variant_names_the_text_only_system() -> None:
    text = render(replace(CARD, translation=replace(MMT, origin="mt")))
    process = section(text, "#### Annotation process")
    assert process.strip().startswith("Machine translation by mmtr's text-only MT system (params `mmt.mt_system")
    assert "never sees the image" in process and "RegionalMMT" not in process
    risks = section(text, "## Bias, Risks, and Limitations")
    assert "**No image.**" in risks and "hallucinated object" not in risks and "**Small systems.**" in risks
    assert "`mt-en-de`" in section(text, "#### Who are the annotators?")
    assert "multimodal-machine-translation" not in DatasetCard(text).data.tags


def test_a_seq2seq_mt_variant_names_each_pairs_model() -> None:
    seq2seq = replace(MMT, origin="mt", mt_backend="seq2seq", held={"en-de": "opus-mt-en-de"}, as_is=True)
    system = "mt-en-de"
    text = dataset_card(
        replace(CARD, translation=seq2seq),
        ROWS,
        [*origins(system), {**origins(system)[-1], "lang": "en", "system": "mt-de-en", "hop": 2}],
        COLUMNS,
        None,
        data_dir="data",
        disk_dir="hf",
    )
    process = section(text, "#### Annotation process")
    assert "- `mt-en-de`: the pre-trained model `opus-mt-en-de`, used as released" in process
    assert "- `mt-de-en`: a small Marian model trained by mmtr" in process
    assert "**Small systems.**" not in text  # a held model is a general-purpose translator


def test_a_human_only_variant_claims_no_translation() -> None:
    text = render(replace(CARD, variant="none", definition="-: the human captions alone"))
    assert (
        section(text, "#### Annotation process").strip()
        == "None: this variant adds nothing to the source corpus's captions."
    )
    risks = section(text, "## Bias, Risks, and Limitations")
    assert "machine translations" not in risks and "**The source corpus's biases.**" in risks
    tags = DatasetCard(text).data.tags
    assert "machine-translation" not in tags and "synthetic-captions" not in tags
    assert "machine-translated by" not in text and "all of them the source corpus's own" in text


def test_every_column_the_export_can_write_is_documented() -> None:
    regions = ("regions", "region_boxes", "num_regions")
    assert list(COLUMN_DOCS) == [*TEXT_COLUMNS, *PROVENANCE, "image_path", "image", *regions]


def test_the_template_is_package_data() -> None:
    """An installed package (not only this checkout) holds the template the card is rendered from."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert any(fnmatch.fnmatch(TEMPLATE, pattern) for pattern in setuptools["package-data"]["corpora"])
    assert (REPO / "corpora" / TEMPLATE).is_file()


def test_a_real_export_loads_through_the_card(tmp_path: Path) -> None:
    """The real-corpus card's front matter (license_name, license_link) still lets load_dataset read the folder."""
    import datasets

    images = images_of(tmp_path / "images")
    rows = [row for row in caption_rows() if row["split"] != "val"]
    export_variant(captions_of(images, rows), images, tmp_path / "none", card=real("flickr30k", None))
    loaded = datasets.load_dataset(str(tmp_path / "none"), cache_dir=str(tmp_path / "cache"))
    assert sorted(loaded) == ["test", "train"] and len(loaded["train"]) == sum(row["split"] == "train" for row in rows)
