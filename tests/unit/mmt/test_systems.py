"""The sentence pairs of a direction, the MT backend registry and a tiny run of every backend: pre-training, the
multimodal and the text-only systems, a seq2seq model, their system.json, loading and hashes (their test scores:
test_evaluation.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch

from common.checks import SettingError
from common.epoch_log import EpochLine, format_epoch
from common.errors import InputError
from common.runtime import Runtime
from corpora import tables
from corpora.prepared import Corpus
from corpora.tables import write_parquet
from features.regions import ImageRegions
from features.store import FeatureStore, FeatureStoreWriter
from mmt.checkpoint import read_checkpoint
from mmt.config import TEXT_ONLY_BACKENDS, Seq2SeqFinetuneConfig, Seq2SeqSettings, SystemsConfig
from mmt.encoded import open_encoded
from mmt.held_models import ORIGIN_FILE
from mmt.model import MMTConfig
from mmt.pairs import (
    ContrastiveItem,
    DirectionData,
    Pairs,
    ParallelText,
    caption_pairs,
    direction_data,
    examples,
    require_splits,
)
from mmt.seq2seq import Seq2SeqTranslator
from mmt.systems import (
    BACKENDS,
    SYSTEM_FILE,
    SystemRequest,
    bleu,
    clear_encoded,
    load_system,
    pairs_sha256,
    pretrain,
    system_backend,
    system_languages,
    system_sha256,
    train_system,
    train_text_pipeline,
)
from mmt.text import SubwordConfig, TextPipeline
from mmt.train import TrainConfig
from mmt.translator import MMTTranslator
from mmt.translator_protocol import Translator
from tests.unit.mmt.test_marian import TINY as TINY_MARIAN

CPU = Runtime("cpu")
K, D = 2, 4
COLOURS = {"red": "rotes", "blue": "blaues", "green": "grünes", "yellow": "gelbes"}
SHAPES = {"circle": "Kreis", "square": "Quadrat", "star": "Stern"}
PLACES = {"left": "links", "right": "rechts", "top": "oben"}
SPLIT_SIZES = {"train": 24, "val": 4, "test": 4}


def sentence(index: int) -> tuple[str, str]:
    """An English sentence and its German translation, varied by ``index``."""
    colour, shape, place = list(COLOURS)[index % 4], list(SHAPES)[(index // 4) % 3], list(PLACES)[(index // 12) % 3]
    return f"A {colour} {shape} is on the {place}.", f"Ein {COLOURS[colour]} {SHAPES[shape]} ist {PLACES[place]}."


def caption_corpus() -> Corpus:
    """Images i00..i31 with en and de translation captions; i00 has no de one; every image also has an en
    comparable caption (which the pairs must leave out). A parallel corpus en-de of 60/4/4 pairs."""
    splits = [split for split, count in SPLIT_SIZES.items() for _ in range(count)]
    ids = [f"i{index:02d}" for index in range(len(splits))]
    images = tables.images_table(
        {
            "image_id": ids,
            "split": splits,
            "path": [f"{i}.png" for i in ids],
            "width": [None] * len(ids),
            "height": [None] * len(ids),
            "dataset": ["toy"] * len(ids),
        }
    )
    rows: list[tuple[str, str, str, str, str]] = []  # caption_id, image_id, split, lang, text
    kinds: list[str] = []  # kind of each row
    for index, (image_id, split) in enumerate(zip(ids, splits, strict=True)):
        en, de = sentence(index)
        rows.append((f"{image_id}#en#t", image_id, split, "en", en))
        kinds.append("translation")
        if index:
            rows.append((f"{image_id}#de#t", image_id, split, "de", de))
            kinds.append("translation")
        rows.append((f"{image_id}#en#c", image_id, split, "en", f"There is a shape number {index}."))
        kinds.append("comparable")
    columns = {
        name: [row[position] for row in rows]
        for position, name in enumerate(("caption_id", "image_id", "split", "lang", "text"))
    }
    captions = tables.captions_table(
        {
            **columns,
            "origin": ["human"] * len(rows),
            "system": [None] * len(rows),
            "hop": [0] * len(rows),
            "parent_id": [None] * len(rows),
            "kind": kinds,
        },
        images=images,
    )
    parallel_splits = ["train"] * 60 + ["val"] * 4 + ["test"] * 4
    pairs = [sentence(index * 7 + 3) for index in range(len(parallel_splits))]
    parallel = tables.parallel_table(
        {"split": parallel_splits, "src": [en for en, _ in pairs], "tgt": [de for _, de in pairs]}
    )
    return Corpus(images, captions, {"en-de": parallel})


def write_store(path: Path, image_ids: Sequence[str], seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    with FeatureStoreWriter(
        path, image_ids=image_ids, max_regions=K, dim=D, extractor="test", checkpoint_sha256=None, config={}
    ) as writer:
        for image_id in image_ids:
            regions = ImageRegions(rng.normal(size=(K, D)).astype(np.float32), np.zeros((K, 4), np.float32))
            writer.write(image_id, regions, width=10, height=10)
    return path


# --- pairs ---------------------------------------------------------------------------------------------------


def test_direction_data_orients_the_corpus() -> None:
    """pivot->target reads src/tgt as stored; target->pivot swaps them; every split is there."""
    corpus = caption_corpus()
    table = corpus.parallel["en-de"]
    forward = direction_data(corpus, pivot="en", target="de", src="en", tgt="de")
    backward = direction_data(corpus, pivot="en", target="de", src="de", tgt="en")
    assert set(forward.corpus) == set(forward.captions) == {"train", "val", "test"}
    assert forward.corpus["train"].pairs().src == table["src"].to_pylist()[:60]
    assert forward.corpus["test"].pairs().tgt == table["tgt"].to_pylist()[64:]
    assert backward.corpus["val"].pairs() == Pairs(table["tgt"].to_pylist()[60:64], table["src"].to_pylist()[60:64])
    assert forward.corpus["train"].pairs().image_ids is None
    assert list(backward.corpus["train"].side(0)) == table["tgt"].to_pylist()[:60]
    assert [len(src) for src, _ in forward.corpus["train"].chunks(size=25)] == [25, 25, 10]
    assert (forward.corpus["train"].count(), forward.corpus["val"].count()) == (60, 4)
    assert backward.captions["val"] == Pairs(
        forward.captions["val"].tgt, forward.captions["val"].src, forward.captions["val"].image_ids
    )


def test_the_corpus_read_from_its_file_is_the_corpus_of_the_table(tmp_path: Path) -> None:
    """The stage reads the parallel table's file a chunk at a time (never whole): the same pairs, the same hash."""
    corpus = caption_corpus()
    path = tmp_path / "en-de.parquet"
    write_parquet(corpus.parallel["en-de"], path)
    file = str(path)
    for src, tgt in (("en", "de"), ("de", "en")):
        in_memory = direction_data(corpus, pivot="en", target="de", src=src, tgt=tgt)
        on_disk = direction_data(corpus, pivot="en", target="de", src=src, tgt=tgt, parallel_file=file)
        for split in ("train", "val", "test"):
            assert on_disk.corpus[split].pairs() == in_memory.corpus[split].pairs()
            # the resume fingerprint of earlier releases hashed the pairs held as lists: a resume state stays valid
            assert pairs_sha256(on_disk.corpus[split]) == pairs_sha256(in_memory.corpus[split].pairs())


def test_direction_data_needs_the_pairs_parallel_corpus() -> None:
    with pytest.raises(InputError, match=r"^prepared tables: no parallel corpus en-fr\.parquet \(check paths"):
        direction_data(caption_corpus(), pivot="en", target="fr", src="en", tgt="fr")


SOURCES = {"parallel": "prepared/parallel/en-de.parquet", "captions": "prepared/corpus/captions.parquet"}


def test_every_split_training_reads_holds_pairs() -> None:
    require_splits(
        direction_data(caption_corpus(), pivot="en", target="de", src="de", tgt="en"), direction="de->en", **SOURCES
    )


def test_an_empty_validation_split_of_the_text_corpus_is_named() -> None:
    corpus = caption_corpus()
    table = corpus.parallel["en-de"]
    corpus = dataclasses.replace(corpus, parallel={"en-de": table.filter(pc.not_equal(table["split"], "val"))})
    data = direction_data(corpus, pivot="en", target="de", src="en", tgt="de")
    with pytest.raises(InputError) as refused:
        require_splits(data, direction="en->de", **SOURCES)
    assert str(refused.value) == (
        "prepared/parallel/en-de.parquet: the val split is empty, but pre-training selects its epoch by it (en->de)"
    )


@pytest.mark.parametrize(
    ("split", "use"), [("val", "fine-tuning selects its epoch by it"), ("test", "the systems are tested on it")]
)
def test_a_split_without_translation_pairs_is_named(split: str, use: str) -> None:
    corpus = caption_corpus()
    captions = corpus.captions
    keep = pc.or_(pc.not_equal(captions["split"], split), pc.not_equal(captions["lang"], "de"))
    data = direction_data(
        dataclasses.replace(corpus, captions=captions.filter(keep)), pivot="en", target="de", src="en", tgt="de"
    )
    assert data.captions["train"].src  # only the split without German captions is empty
    with pytest.raises(InputError) as refused:
        require_splits(data, direction="en->de", **SOURCES)
    assert str(refused.value) == (
        f"prepared/corpus/captions.parquet: no en->de translation pairs in the {split} split, but {use} (each needs "
        "an image with a translation caption in both languages)"
    )


def test_caption_pairs_join_translation_captions_on_the_image() -> None:
    """Only translation captions of the split; images lacking either language are left out; source order."""
    captions = caption_corpus().captions
    train = caption_pairs(captions, "en", "de", "train")
    assert train.image_ids == [f"i{index:02d}" for index in range(1, 24)]  # i00 has no de caption
    assert (train.src[0], train.tgt[0]) == sentence(1)
    test = caption_pairs(captions, "de", "en", "test")
    assert test.image_ids == ["i28", "i29", "i30", "i31"]
    assert list(zip(test.tgt, test.src, strict=True)) == [sentence(index) for index in range(28, 32)]
    assert caption_pairs(captions, "en", "fr", "train") == Pairs([], [], [])


def annotations(images: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Image-dependent words of the German test captions of i28 and i29 (their colour) and of the English one of
    i30; one en->de contrastive item over i28 and i29."""
    words = tables.image_dependent_table(
        {
            "split": ["test"] * 3,
            "image_id": ["i28", "i29", "i30"],
            "lang": ["de", "de", "en"],
            "words": [["rotes"], ["blaues"], ["green"]],
        },
        images=images,
    )
    items = tables.contrastive_table(
        {
            "src_lang": ["en"],
            "tgt_lang": ["de"],
            "source": ["A dark circle is on the top."],
            "image_a": ["i28"],
            "image_b": ["i29"],
            "translation_a": [sentence(28)[1]],
            "translation_b": [sentence(29)[1]],
        },
        images=images,
    )
    return words, items


def test_direction_data_carries_the_evaluation_annotations() -> None:
    """The words of each target caption (empty where none are recorded) and the direction's contrastive items."""
    plain = caption_corpus()
    words, items = annotations(plain.images)
    corpus = dataclasses.replace(plain, image_dependent=words, contrastive=items)
    forward = direction_data(corpus, pivot="en", target="de", src="en", tgt="de")
    backward = direction_data(corpus, pivot="en", target="de", src="de", tgt="en")
    assert sentence(28)[1].startswith("Ein rotes") and sentence(29)[1].startswith("Ein blaues")
    assert forward.captions["test"].tgt_words == [["rotes"], ["blaues"], [], []]
    assert backward.captions["test"].tgt_words == [[], [], ["green"], []]
    assert forward.captions["train"].tgt_words == [[] for _ in forward.captions["train"].src]
    assert forward.contrastive == [
        ContrastiveItem("A dark circle is on the top.", "i28", "i29", sentence(28)[1], sentence(29)[1])
    ]
    assert backward.contrastive == []
    without = direction_data(plain, pivot="en", target="de", src="en", tgt="de")
    assert without.captions["test"].tgt_words is None and without.contrastive is None


# --- settings and the registry -------------------------------------------------------------------------------


def test_backend_registry_rows() -> None:
    assert list(BACKENDS) == ["mmt", "text-only", "seq2seq"]
    assert [backend.multimodal for backend in BACKENDS.values()] == [True, False, False]
    folder = Path("/systems/x")
    weights = folder / "finetune.safetensors"
    assert BACKENDS["mmt"].weights_file(folder) == BACKENDS["text-only"].weights_file(folder) == weights


def test_seq2seq_weights_file_prefers_safetensors(tmp_path: Path) -> None:
    assert BACKENDS["seq2seq"].weights_file(tmp_path) == tmp_path / "model.safetensors"  # none yet: the usual name
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    assert BACKENDS["seq2seq"].weights_file(tmp_path) == tmp_path / "pytorch_model.bin"
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert BACKENDS["seq2seq"].weights_file(tmp_path) == tmp_path / "model.safetensors"


def test_the_config_names_every_text_only_backend_of_the_registry() -> None:
    """mmt.mt_system is checked against the config's own list (mmt/config.py imports no backend): the same rows."""
    assert [name for name, backend in BACKENDS.items() if not backend.multimodal] == list(TEXT_ONLY_BACKENDS)


def test_mt_system_must_be_a_text_only_backend() -> None:
    with pytest.raises(SettingError, match=r"^mt_system: got 'mmt', allowed: text-only, seq2seq$"):
        SystemsConfig(mt_system="mmt")
    with pytest.raises(SettingError, match=r"^mt_system: got 'moses'"):
        SystemsConfig(mt_system="moses")
    assert SystemsConfig(mt_system="seq2seq").mt_system == "seq2seq"


@pytest.mark.parametrize("beam", [0, 65])
def test_beam_range(beam: int) -> None:
    with pytest.raises(SettingError, match=rf"^beam: got {beam}, allowed: 1 to 64$"):
        SystemsConfig(beam=beam)


def test_system_backend_reads_system_json(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"system\.json: not found; .* is not a trained system"):
        system_backend(tmp_path)
    (tmp_path / SYSTEM_FILE).write_text(json.dumps({"backend": "moses"}))
    with pytest.raises(InputError, match=r"system\.json: unknown backend 'moses'; known: mmt, text-only, seq2seq$"):
        system_backend(tmp_path)
    (tmp_path / SYSTEM_FILE).write_text("{}")
    with pytest.raises(InputError, match="unknown backend None"):
        system_backend(tmp_path)
    (tmp_path / SYSTEM_FILE).write_text(json.dumps({"backend": "seq2seq"}))
    assert system_backend(tmp_path) is BACKENDS["seq2seq"]
    with pytest.raises(InputError, match="not found"):
        load_system(str(tmp_path / "nothing"), None, CPU)


class EchoTranslator:
    """Returns the reference of each sentence it knows, and records what it was asked."""

    name = "echo"

    def __init__(self, known: dict[str, str]) -> None:
        self.known = known
        self.calls: list[tuple[list[str], list[str] | None, int]] = []

    def translate(
        self,
        sentences: Sequence[str],
        image_ids: Sequence[str] | None = None,
        *,
        beam: int = 5,
        batch_size: int = 32,
        max_len: int = 100,
        stop: threading.Event | None = None,
    ) -> list[str]:
        self.calls.append((list(sentences), None if image_ids is None else list(image_ids), beam))
        return [self.known.get(text, "nichts") for text in sentences]

    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        image_ids: Sequence[str] | None = None,
        *,
        batch_size: int = 32,
    ) -> list[float]:
        return [
            0.0 if self.known.get(source) == target else -1.0 for source, target in zip(sources, targets, strict=True)
        ]


def test_bleu_scores_the_first_limit_pairs() -> None:
    pairs = Pairs([sentence(i)[0] for i in range(4)], [sentence(i)[1] for i in range(4)], ["a", "b", "c", "d"])
    perfect = EchoTranslator({sentence(i)[0]: sentence(i)[1] for i in range(2)})
    assert isinstance(perfect, Translator)
    assert bleu(perfect, pairs, tgt_lang="de", beam=3, limit=2) == pytest.approx(100.0)
    assert perfect.calls == [(pairs.src[:2], ["a", "b"], 3)]
    assert bleu(perfect, pairs, tgt_lang="de", beam=1) < 100.0  # pairs 3-4 are translated as "nichts"
    text_only = dataclasses.replace(pairs, image_ids=None)
    bleu(perfect, text_only, tgt_lang="de", beam=1, limit=10)
    assert perfect.calls[-1] == (pairs.src, None, 1)


# --- a tiny run of every backend -----------------------------------------------------------------------------

CONFIG = SystemsConfig(
    targets=("de",),
    text=SubwordConfig(vocab_size=60, max_len=24),
    model=MMTConfig(emb_dim=16, hidden=16, dropout=0.1),
    pretrain=TrainConfig(epochs=1, batch_size=16, patience=1),
    finetune=TrainConfig(epochs=2, batch_size=8, lr=1e-3, patience=2),
    beam=2,
    mt_system="text-only",
    seq2seq=Seq2SeqSettings(train=TINY_MARIAN),
)


@dataclasses.dataclass(frozen=True)
class Trained:
    root: Path
    data: DirectionData
    store: Path
    pretrain_score: float
    scores: dict[str, float | None]

    def request(self, out_dir: Path, *, seed: int = 0, config: SystemsConfig = CONFIG) -> SystemRequest:
        return SystemRequest(
            src="en",
            tgt="de",
            data=self.data,
            config=config,
            out_dir=out_dir,
            pretrained=self.root / "en-de" / "pretrain",
            store=str(self.store),
            mt_models=self.root / "held",
            seed=seed,
            runtime=CPU,
        )

    def folder(self, backend: str) -> Path:
        return self.root / f"{backend}-en-de"


def train_every_backend(root: Path) -> Trained:
    """Subwords, pre-training and the three backends' systems of en->de, in ``root``."""
    corpus = caption_corpus()
    data = direction_data(corpus, pivot="en", target="de", src="en", tgt="de")
    store = write_store(root / "store", corpus.images["image_id"].to_pylist())
    model_dir = root / "en-de"
    train_text_pipeline(data, CONFIG.text, src="en", tgt="de", out_dir=model_dir, seed=0)
    score = pretrain(data, CONFIG, model_dir=model_dir, region_dim=D, seed=0, runtime=CPU)
    partial = Trained(root, data, store, score, {})
    scores = {backend: train_system(backend, partial.request(partial.folder(backend))) for backend in BACKENDS}
    return dataclasses.replace(partial, scores=scores)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    return train_every_backend(tmp_path_factory.mktemp("systems"))


def test_text_pipeline_trains_on_corpus_and_caption_training_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The subword vocabularies see the train split of the parallel corpus, then the train captions."""
    calls: list[dict[str, object]] = []

    def record(src_texts: Iterable[str], tgt_texts: Iterable[str], **options: object) -> str:
        calls.append({"src": list(src_texts), "tgt": list(tgt_texts), **options})
        return "pipeline"

    monkeypatch.setattr(TextPipeline, "train", record)
    table = pa.table(
        {"split": ["train", "train", "val", "test"], "src": ["s1", "s2", "sv", "x"], "tgt": ["t1", "t2", "tv", "y"]}
    )
    splits = {split: ParallelText(table, split) for split in ("train", "val", "test")}
    captions = {split: Pairs([f"c{split}"], [f"d{split}"], ["i"]) for split in ("train", "val", "test")}
    config = SubwordConfig(vocab_size=80)
    result = train_text_pipeline(DirectionData(splits, captions), config, src="de", tgt="en", out_dir=tmp_path, seed=4)
    assert result == "pipeline"
    assert calls == [
        {
            "src": ["s1", "s2", "ctrain"],
            "tgt": ["t1", "t2", "dtrain"],
            "src_lang": "de",
            "tgt_lang": "en",
            "config": config,
            "out_dir": tmp_path,
            "seed": 4,
        }
    ]


def test_with_a_work_folder_the_corpus_is_encoded_once_and_mapped(tmp_path: Path) -> None:
    """Pre-training encodes the text-only corpus into the work folder and trains on the mapped arrays: the same weights
    as from the examples in memory; fine-tuning, which mixes corpus pairs in, maps the same folder."""
    corpus = caption_corpus()
    data = direction_data(corpus, pivot="en", target="de", src="en", tgt="de")
    weights: dict[str, bytes] = {}
    for name, work in (("memory", None), ("mapped", tmp_path / "work")):
        model_dir = tmp_path / name / "en-de"
        train_text_pipeline(data, CONFIG.text, src="en", tgt="de", out_dir=model_dir, seed=0)
        pretrain(data, CONFIG, model_dir=model_dir, region_dim=D, seed=0, runtime=CPU, work=work)
        weights[name] = (model_dir / "pretrain.safetensors").read_bytes()
    assert weights["mapped"] == weights["memory"]
    (folder,) = (tmp_path / "work" / "encoded").iterdir()
    mapped = open_encoded(folder)
    text = TextPipeline.load(tmp_path / "mapped" / "en-de")
    assert isinstance(mapped.src_ids, np.memmap)
    assert list(mapped) == list(examples(text, data.corpus["train"], None))
    store = write_store(tmp_path / "store", corpus.images["image_id"].to_pylist())
    request = SystemRequest(
        src="en",
        tgt="de",
        data=data,
        config=dataclasses.replace(CONFIG, finetune=dataclasses.replace(CONFIG.finetune, mixed_pairs=10)),
        out_dir=tmp_path / "mapped" / "mt-en-de",
        pretrained=tmp_path / "mapped" / "en-de" / "pretrain",
        store=str(store),
        mt_models=tmp_path / "held",
        seed=0,
        runtime=CPU,
        work=tmp_path / "work",
    )
    train_system("text-only", request)
    assert [path.name for path in (tmp_path / "work" / "encoded").iterdir()] == [folder.name]
    clear_encoded(tmp_path / "work")
    assert not (tmp_path / "work" / "encoded").exists()


def test_trained_text_pipeline_is_saved_with_the_direction(trained: Trained) -> None:
    text = TextPipeline.load(trained.root / "en-de")
    assert (text.config.src_lang, text.config.tgt_lang, text.config.max_len) == ("en", "de", 24)
    assert text.encode_source(["A red circle is on the left."]).unknown == 0
    assert text.encode_target(["Ein gelbes Stern ist oben."]).unknown == 0


def test_examples_hold_subword_ids_and_store_rows(trained: Trained, caplog: pytest.LogCaptureFixture) -> None:
    text = TextPipeline.load(trained.root / "en-de")
    pairs = trained.data.captions["val"]
    store = FeatureStore.open(trained.store)
    found = examples(text, pairs, store)
    assert [example.src_ids for example in found] == [tuple(ids) for ids in text.encode_source(pairs.src).ids]
    assert [example.tgt_ids for example in found] == [tuple(ids) for ids in text.encode_target(pairs.tgt).ids]
    assert [example.image_row for example in found] == [24, 25, 26, 27]
    assert [example.image_row for example in examples(text, pairs, None)] == [None] * 4
    assert [example.image_row for example in examples(text, trained.data.corpus["val"], store)] == [None] * 4
    short = TextPipeline(dataclasses.replace(text.config, max_len=3), text.src_vocab, text.tgt_vocab)
    with caplog.at_level(logging.WARNING, logger="mmt.pairs"):
        cut = examples(short, pairs, None)
    assert "Truncated 4 source and 4 target sentences to 3 subwords" in caplog.text
    assert all(len(example.src_ids) == 3 and len(example.tgt_ids) == 3 for example in cut)


def test_pretrain_writes_a_text_only_checkpoint(trained: Trained) -> None:
    checkpoint = read_checkpoint(trained.root / "en-de" / "pretrain", device=torch.device("cpu"))
    assert checkpoint["shape"]["region_dim"] == D and checkpoint["config"]["hidden"] == 16
    assert 0.0 <= trained.pretrain_score <= 100.0


def test_every_system_folder_records_its_backend(trained: Trained) -> None:
    for backend in BACKENDS:
        folder = trained.folder(backend)
        assert json.loads((folder / SYSTEM_FILE).read_text()) == {"backend": backend, "src": "en", "tgt": "de"}
        assert system_backend(folder) is BACKENDS[backend]
        assert system_languages(folder) == ("en", "de")
    legacy = trained.folder("mmt")  # written before system.json recorded languages: its text.json tells them
    (legacy / SYSTEM_FILE).write_text('{"backend": "mmt"}')
    assert system_languages(legacy) == ("en", "de")
    (legacy / SYSTEM_FILE).write_text(json.dumps({"backend": "mmt", "src": "en", "tgt": "de"}))
    files = {"finetune.safetensors", "finetune.json", "text.json", "src.model", "tgt.model"}
    assert files <= {p.name for p in trained.folder("mmt").iterdir()}
    assert isinstance(trained.scores["mmt"], float) and isinstance(trained.scores["text-only"], float)
    assert trained.scores["seq2seq"] is None
    assert not (trained.folder("seq2seq") / ORIGIN_FILE).exists()  # a Marian trained here: nothing held


def test_loaded_systems_are_translators(trained: Trained) -> None:
    mmt = load_system(str(trained.folder("mmt")), str(trained.store), CPU)
    text_only = load_system(str(trained.folder("text-only")), None, CPU)
    seq2seq = load_system(str(trained.folder("seq2seq")), None, CPU)
    assert isinstance(mmt, MMTTranslator) and isinstance(text_only, MMTTranslator)
    assert isinstance(seq2seq, Seq2SeqTranslator)
    for system in (mmt, text_only, seq2seq):
        assert isinstance(system, Translator)
    assert mmt.regions is not None and text_only.regions is None
    assert (mmt.name, text_only.name) == ("mmt-en-de", "text-only-en-de")
    assert load_system(str(trained.folder("mmt")), str(trained.store), CPU) is mmt  # loaded once per process


def test_a_retrained_system_is_loaded_afresh(trained: Trained, tmp_path: Path) -> None:
    folder = tmp_path / "text-only"
    shutil.copytree(trained.folder("text-only"), folder)
    first = load_system(str(folder), None, CPU)
    assert load_system(str(folder), None, CPU) is first
    weights = folder / "finetune.safetensors"
    retrained = tmp_path / "retrained.safetensors"
    shutil.copyfile(weights, retrained)
    retrained.replace(weights)  # as an atomic rewrite by train_system would
    assert load_system(str(folder), None, CPU) is not first


def test_a_system_without_its_weights_is_an_input_error(trained: Trained, tmp_path: Path) -> None:
    folder = tmp_path / "mmt"
    shutil.copytree(trained.folder("mmt"), folder)
    (folder / "finetune.safetensors").unlink()
    with pytest.raises(InputError, match=r"finetune\.safetensors: not found; the system in .* is incomplete"):
        load_system(str(folder), str(trained.store), CPU)


def test_translate_returns_one_string_per_input(trained: Trained) -> None:
    pairs = trained.data.captions["test"]
    for backend in BACKENDS:
        system = load_system(str(trained.folder(backend)), str(trained.store), CPU)
        outputs = system.translate(pairs.src, pairs.image_ids, beam=2, max_len=10)
        assert len(outputs) == len(pairs.src) and all(isinstance(text, str) for text in outputs), backend
        assert system.translate([], [], beam=2) == []


def test_text_only_system_ignores_images_and_mmt_needs_them(trained: Trained) -> None:
    pairs = trained.data.captions["test"]
    text_only = load_system(str(trained.folder("text-only")), str(trained.store), CPU)  # the store is not read
    assert getattr(text_only, "regions", "?") is None
    without = text_only.translate(pairs.src, None, beam=2, max_len=10)
    assert text_only.translate(pairs.src, ["not-an-image"] * 4, beam=2, max_len=10) == without
    with pytest.raises(InputError, match=r"mmt-en-de: a multimodal system needs the region features of its images"):
        load_system(str(trained.folder("mmt")), None, CPU)
    mmt = load_system(str(trained.folder("mmt")), str(trained.store), CPU)
    with pytest.raises(InputError, match="mmt-en-de is multimodal: give one image id per sentence"):
        mmt.translate(pairs.src, None, beam=2)
    with pytest.raises(InputError, match=r"region features missing for an image"):
        mmt.translate(pairs.src[:1], ["not-an-image"], beam=2)


def test_system_sha256_is_the_weights_file_hash(trained: Trained) -> None:
    for backend, name in (
        ("mmt", "finetune.safetensors"),
        ("text-only", "finetune.safetensors"),
        ("seq2seq", "model.safetensors"),
    ):
        folder = trained.folder(backend)
        assert system_sha256(str(folder)) == hashlib.sha256((folder / name).read_bytes()).hexdigest(), backend
    assert system_sha256(str(trained.folder("mmt"))) != system_sha256(str(trained.folder("text-only")))


def _weights(path: Path) -> dict[str, torch.Tensor]:
    tensors = read_checkpoint(path, device=torch.device("cpu"))["state_dict"]
    assert isinstance(tensors, dict)
    return tensors


def test_same_seed_same_weights(trained: Trained, tmp_path: Path) -> None:
    """Retraining with the seed of the fixture gives identical weights; another seed other weights."""
    again = train_system("mmt", trained.request(tmp_path / "again"))
    assert again == trained.scores["mmt"]
    first, second = _weights(trained.folder("mmt") / "finetune"), _weights(tmp_path / "again" / "finetune")
    assert first.keys() == second.keys()
    for name, tensor in first.items():
        assert torch.equal(tensor, second[name]), name
    for name in ("finetune.safetensors", "finetune.json"):  # the same weights and fields: the same bytes
        assert (trained.folder("mmt") / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
    train_system("mmt", trained.request(tmp_path / "other", seed=1))
    other = _weights(tmp_path / "other" / "finetune")
    assert any(not torch.equal(tensor, other[name]) for name, tensor in first.items())


def test_fine_tuning_starts_from_the_pretrained_text_weights(trained: Trained, tmp_path: Path) -> None:
    """With a learning rate too small to move them, fine-tuned text weights stay the pre-trained ones, while
    the visual projection is fresh."""
    frozen = dataclasses.replace(CONFIG, finetune=TrainConfig(epochs=1, batch_size=8, lr=1e-12, patience=1))
    train_system("mmt", trained.request(tmp_path / "mmt", config=frozen))
    pretrained, tuned = _weights(trained.root / "en-de" / "pretrain"), _weights(tmp_path / "mmt" / "finetune")
    text_weights = [name for name in pretrained if not name.startswith("region_proj.")]
    assert text_weights and len(text_weights) < len(pretrained)
    for name in text_weights:
        torch.testing.assert_close(tuned[name], pretrained[name], rtol=0, atol=1e-9)


def _held_config(trained: Trained, *, as_is: bool) -> SystemsConfig:
    """The Marian trained here, held under paths.mt_models as opus-mt-en-de for ``seq2seq.held``."""
    held = trained.root / "held"
    if not held.is_dir():
        shutil.copytree(trained.folder("seq2seq"), held / "opus-mt-en-de", ignore=shutil.ignore_patterns(SYSTEM_FILE))
    finetune = Seq2SeqFinetuneConfig(epochs=1, batch_size=8, max_steps=2, lr=1e-3, warmup_steps=1)
    settings = Seq2SeqSettings(held={"en-de": "opus-mt-en-de"}, as_is=as_is, finetune=finetune, train=TINY_MARIAN)
    return dataclasses.replace(CONFIG, mt_system="seq2seq", seq2seq=settings)


def test_a_held_model_as_is_keeps_its_weights(trained: Trained, tmp_path: Path) -> None:
    """seq2seq.as_is: the held model's files copied, its weights byte for byte, recorded as not fine-tuned."""
    assert (
        train_system("seq2seq", trained.request(tmp_path / "copied", config=_held_config(trained, as_is=True))) is None
    )
    source = trained.root / "held" / "opus-mt-en-de" / "model.safetensors"
    assert (tmp_path / "copied" / "model.safetensors").read_bytes() == source.read_bytes()
    assert system_sha256(str(tmp_path / "copied")) == system_sha256(str(trained.folder("seq2seq")))
    origin = json.loads((tmp_path / "copied" / ORIGIN_FILE).read_text())
    assert (origin["model"], origin["origin"], origin["fine_tuned"]) == ("opus-mt-en-de", "mt_models", False)
    assert isinstance(load_system(str(tmp_path / "copied"), None, CPU), Seq2SeqTranslator)


def test_a_held_model_is_fine_tuned_on_the_caption_translations(
    trained: Trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default a held model is fine-tuned on the pair's train captions, validated on its val captions."""
    import mmt.held_models

    seen: dict[str, object] = {}
    fit = mmt.held_models.fit

    def recording_fit(
        translator: Seq2SeqTranslator, train: object, val: object, config: object, **kwargs: object
    ) -> None:
        seen.update(train=train, val=val, config=config)
        fit(translator, train, val, config, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(mmt.held_models, "fit", recording_fit)
    config = _held_config(trained, as_is=False)
    train_system("seq2seq", trained.request(tmp_path / "tuned", config=config))
    captions = trained.data.captions
    assert seen == {
        "train": (captions["train"].src, captions["train"].tgt),
        "val": (captions["val"].src, captions["val"].tgt),
        "config": config.seq2seq.finetune,
    }
    source = trained.root / "held" / "opus-mt-en-de" / "model.safetensors"
    assert system_sha256(str(tmp_path / "tuned")) != hashlib.sha256(source.read_bytes()).hexdigest()
    origin = json.loads((tmp_path / "tuned" / ORIGIN_FILE).read_text())
    assert origin["fine_tuned"] is True and origin["fine_tuning_pairs"] == len(captions["train"].src)


def test_a_checkpoint_copied_beside_another_text_pipeline_is_refused(trained: Trained, tmp_path: Path) -> None:
    """The en->de checkpoint in a folder whose text pipeline is de->en (the two subword models and languages
    swapped): loading names the checkpoint and says it belongs to another system folder, whether the vocabulary
    sizes already differ or only the recorded pipeline does."""
    import shutil

    source = trained.folder("mmt")
    checkpoint = json.loads((source / "finetune.json").read_text())
    assert checkpoint["extra"]["text_pipeline"]["src_lang"] == "en"  # recorded when training ended
    swapped = tmp_path / "mmt-de-en"
    shutil.copytree(source, swapped)
    (swapped / "src.model").write_bytes((source / "tgt.model").read_bytes())
    (swapped / "tgt.model").write_bytes((source / "src.model").read_bytes())
    config = json.loads((source / "text.json").read_text())
    config.update(
        src_lang="de", tgt_lang="en", src_vocab_size=config["tgt_vocab_size"], tgt_vocab_size=config["src_vocab_size"]
    )
    (swapped / "text.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"finetune\.json: .*the checkpoint belongs to another system folder"):
        MMTTranslator.load(swapped, "finetune", regions=None, device=torch.device("cpu"))
    MMTTranslator.load(source, "finetune", regions=None, device=torch.device("cpu"))  # its own folder: fine


def test_each_fit_leaves_its_learning_curve_beside_the_checkpoint(trained: Trained) -> None:
    for path in (
        trained.root / "en-de" / "pretrain.history.tsv",
        trained.folder("mmt") / "finetune.history.tsv",
        trained.folder("text-only") / "finetune.history.tsv",
    ):
        lines = path.read_text().splitlines()
        assert lines[0].split("\t") == ["step", "epoch", "loss", "val_bleu"], path
        assert len(lines) >= 2 and 0 <= float(lines[1].split("\t")[3]) <= 100
        assert lines[1].split("\t")[1] == "1", path  # epochs counted from 1: the first validation ends epoch 1


def test_each_validation_reaches_the_progress_callback_as_the_history_records_it(
    trained: Trained, tmp_path: Path
) -> None:
    model_dir = tmp_path / "en-de"
    shutil.copytree(trained.root / "en-de", model_dir)
    seen: list[EpochLine] = []
    best = pretrain(
        trained.data, CONFIG, model_dir=model_dir, region_dim=D, seed=0, runtime=CPU, on_validation=seen.append
    )
    history = (model_dir / "pretrain.history.tsv").read_text().splitlines()
    columns = history[0].split("\t")
    recorded = [dict(zip(columns, line.split("\t"), strict=True)) for line in history[1:]]
    assert len(seen) == len(recorded) >= 1 and max(line.scores[""] for line in seen) == pytest.approx(best)
    for line, row in zip(seen, recorded, strict=True):
        assert line.run == "en-de pretrain" and line.score_name == "val BLEU"
        expected = (int(row["step"]), int(row["epoch"]), row["val_bleu"])
        assert (line.step, line.epoch, f"{line.scores['']:.6g}") == expected
    assert seen[0].epoch == 1 and format_epoch(seen[0]).startswith(f"en-de pretrain · epoch 1/{CONFIG.pretrain.epochs}")
