"""Held MT models: found in the MT models folder or the local Hugging Face cache, fine-tuned on the caption
translations (or taken as they are), and saved as a system folder with only the files a translator loads.

Nothing is downloaded: a model id is looked up in the local cache alone (``local_files_only``).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from common.errors import InputError
from common.files import atomic_dir, read_json, write_json
from mmt.seq2seq import EpochFn, Seq2SeqTranslator, TrainingSchedule, check_pairs, fit, weights_file

logger = logging.getLogger(__name__)

ORIGIN_FILE = "origin.json"  # what a seq2seq system folder was made from: model, where, family, codes, fine-tuned
# written by every tokenizer beside its own vocabulary files (type(tokenizer).vocab_files_names)
TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "added_tokens.json")
MODEL_FILES = ("config.json", "generation_config.json")


@dataclass(frozen=True)
class HeldModel:
    """Where a held model's files are.

    Attributes:
        name: As params name it: a folder under the MT models folder, or a model id (``org/name``).
        folder: The local folder holding its files (a cache snapshot for a model id).
        origin: ``mt_models`` (a folder there) or ``hub_cache`` (a snapshot of the local Hugging Face cache).
    """

    name: str
    folder: Path
    origin: str


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, as huggingface_hub finds it: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
    ``~/.cache/huggingface/hub`` (read at each call, so a changed environment counts)."""
    if "HF_HUB_CACHE" in os.environ:
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if "HF_HOME" in os.environ:
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def resolve_held_model(name: str, mt_models: Path) -> HeldModel:
    """The files of the held model ``name``: the folder ``mt_models/name`` if there is one, else the snapshot of the
    model id ``name`` in the local Hugging Face cache.

    Raises:
        InputError: neither holds it (the message says how to fill either).
    """
    folder = mt_models / name
    if folder.is_dir():
        return HeldModel(name, folder, "mt_models")
    if name.count("/") != 1:
        raise InputError(
            f"{folder}: no such model folder (and {name!r} is not a model id org/name to look up in the "
            "Hugging Face cache); download it elsewhere with `huggingface-cli download <id> --local-dir <folder>` "
            "and place the folder there"
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache_dir()
    try:
        snapshot = snapshot_download(name, cache_dir=str(cache), local_files_only=True)
    except (LocalEntryNotFoundError, OSError) as error:
        raise InputError(
            f"{name}: not in the Hugging Face cache {cache} and not a folder in {mt_models} (nothing is downloaded "
            f"here: run `huggingface-cli download {name}` where there is network and copy the cache, or "
            f"`huggingface-cli download {name} --local-dir {folder}`) [{type(error).__name__}]"
        ) from None
    return HeldModel(name, Path(snapshot), "hub_cache")


def build_held_system(
    held: HeldModel,
    *,
    src: str,
    tgt: str,
    out_dir: Path,
    language_codes: Mapping[str, Mapping[str, str]],
    finetune: TrainingSchedule | None,
    train: tuple[Sequence[str], Sequence[str]],
    val: tuple[Sequence[str], Sequence[str]],
    device: torch.device,
    seed: int,
    on_epoch: EpochFn | None = None,
    stop: threading.Event | None = None,
) -> Seq2SeqTranslator:
    """The system folder ``out_dir`` from a held model: fine-tuned on the ``train`` pairs (the weights of the epoch
    with the lowest loss on ``val`` kept) when ``finetune`` is given, else as it is; in both cases holding only
    config.json, generation_config.json, the tokenizer's files, one weight file and :data:`ORIGIN_FILE`. ``stop``
    set, the fine-tuning is given up before its next batch (:class:`common.stopping.Cancelled`).

    Returns:
        The system, loaded back from ``out_dir``.
    """
    translator = Seq2SeqTranslator.from_folder(
        held.folder, src=src, tgt=tgt, device=device, language_codes=language_codes, name=out_dir.name
    )
    if finetune is not None:
        check_pairs(*train, where=f"{src}-{tgt} fine-tuning")
        check_pairs(*val, where=f"{src}-{tgt} validation")
        logger.info("Fine-tuning %s (%s) on %d caption pairs", held.name, translator.languages.family, len(train[0]))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # forked: dropout is seeded without touching the caller's RNG
            fit(
                translator,
                train,
                val,
                finetune,
                seed=seed,
                settings_key="mmt.seq2seq.finetune",
                phase="finetune",
                on_epoch=on_epoch,
                stop=stop,
            )
    languages = translator.languages
    with atomic_dir(out_dir) as tmp:
        if finetune is not None:
            translator.model.save_pretrained(tmp)  # config, generation config, model.safetensors
        else:
            _copy_files(held.folder, tmp, MODEL_FILES)
            weights = weights_file(held.folder)
            assert weights is not None, "Seq2SeqTranslator.from_folder checked the weights"
            shutil.copyfile(weights, tmp / weights.name)
        _copy_files(held.folder, tmp, tokenizer_files(translator.tokenizer))
        write_json(
            tmp / ORIGIN_FILE,
            {
                "model": held.name,
                "origin": held.origin,
                "revision": held.folder.name if held.origin == "hub_cache" else None,  # the cache snapshot
                "family": languages.family,
                "src_code": languages.src_code,
                "tgt_code": languages.tgt_code,
                "fine_tuned": finetune is not None,
                "fine_tuning_pairs": len(train[0]) if finetune is not None else 0,
            },
        )
    logger.info("%s: %s from %s, %s", out_dir.name, held.name, held.origin, "fine-tuned" if finetune else "as it is")
    return load_seq2seq_system(out_dir, src=src, tgt=tgt, device=device)


def load_seq2seq_system(folder: Path, *, src: str, tgt: str, device: torch.device) -> Seq2SeqTranslator:
    """A seq2seq system folder as a translator, with the language codes its :data:`ORIGIN_FILE` recorded (a Marian
    trained here records none and needs none)."""
    codes: dict[str, dict[str, str]] = {}
    origin_path = folder / ORIGIN_FILE
    if origin_path.is_file():
        origin = read_json(origin_path)
        if not isinstance(origin, dict) or "family" not in origin:
            raise InputError(f"{origin_path}: expected an object with the model's family")
        recorded = {src: origin.get("src_code"), tgt: origin.get("tgt_code")}
        if origin["family"] == "marian-multi":  # recorded as the token >>xx<<, looked up as xx
            recorded = {tgt: str(origin.get("tgt_code") or "").removeprefix(">>").removesuffix("<<")}
        codes[str(origin["family"])] = {lang: str(code) for lang, code in recorded.items() if code}
    return Seq2SeqTranslator.from_folder(folder, src=src, tgt=tgt, device=device, language_codes=codes)


def tokenizer_files(tokenizer: object) -> tuple[str, ...]:
    """The names of the files a tokenizer of this class loads from (those a folder lacks are skipped on copy)."""
    own = tuple(str(name) for name in getattr(type(tokenizer), "vocab_files_names", {}).values())
    return tuple(dict.fromkeys(own + TOKENIZER_FILES))


def _copy_files(source: Path, destination: Path, names: Sequence[str]) -> None:
    for name in names:
        if (source / name).is_file():
            shutil.copyfile(source / name, destination / name)
