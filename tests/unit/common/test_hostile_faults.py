"""Resource faults while writing and reading: a full disk, a read-only or non-writable folder, a missing permission.

Each ends in one line naming the file (by its final name, never a temporary) and the errno, the previous output
stays as it was, no temporary is left, and a rerun once the fault is gone writes the bytes an unfaulted run writes.
Faults are injected at the lowest write each writer uses (root ignores file modes), raised as the library in
question words them.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import SafetensorError

from common import checkpoints, tensor_tree
from common.errors import StorageError, resource_fault
from common.files import atomic_dir, read_lines, staged_children, write_json
from common.train_state import ResumePoint, fingerprint, state_file
from corpora import tables
from corpora.prepared import Corpus, write_prepared
from features import store
from mmt.checkpoint import save_mmt
from mmtr.errors import user_errors
from tests.unit.corpora.test_tables import caption_columns, image_columns
from tests.unit.features.test_store import _write_store
from tests.unit.mmt.test_train import new_model
from tests.unit.retrieval.test_safetensors_checkpoints import save, toy

NO_SPACE = "[Errno 28] No space left on device"


def arrow_no_space() -> OSError:
    """What pyarrow raises when the disk fills (errno set, no file name)."""
    return OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")


def safetensors_fault(number: int, path: str = "/data/.tmpAb12") -> SafetensorError:
    """What safetensors raises when the OS refuses its write (the OS error folded into the message)."""
    return SafetensorError(
        f'Error while serializing: I/O error: {os.strerror(number)} (os error {number}) at path "{path}"'
    )


def fail_on_call(
    monkeypatch: pytest.MonkeyPatch, owner: object, name: str, error: BaseException, call: int = 1
) -> None:
    """Make ``owner.name`` raise ``error`` on its ``call``-th call, after doing its work (so the fault comes midway,
    with bytes already on disk); the calls before it succeed."""
    real = getattr(owner, name)
    calls = [0]

    def faulty(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        calls[0] += 1
        if calls[0] == call:
            raise error
        return result

    monkeypatch.setattr(owner, name, faulty)


def refuse_new_files_in(monkeypatch: pytest.MonkeyPatch, folder: Path, number: int) -> None:
    """``folder`` refuses new files and folders with ``number`` (EROFS: read-only file system, EACCES: not
    writable), as the kernel would; elsewhere nothing changes."""
    real_open, real_mkdir = os.open, os.mkdir

    def guarded(call: Callable[..., Any]) -> Callable[..., Any]:
        def refused(path: Any, *args: Any, **kwargs: Any) -> Any:
            flags = args[0] if call is real_open and args else 0
            creates = call is real_mkdir or flags & os.O_CREAT
            if creates and Path(os.fsdecode(path)).parent == folder:
                raise OSError(number, os.strerror(number), os.fsdecode(path))
            return call(path, *args, **kwargs)

        return refused

    monkeypatch.setattr(os, "open", guarded(real_open))
    monkeypatch.setattr(os, "mkdir", guarded(real_mkdir))


def tree_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def hidden(folder: Path) -> list[str]:
    """Temporaries (and anything else hidden) left anywhere under ``folder``."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob(".*"))


def one_line(error: BaseException, capsys: pytest.CaptureFixture[str], prog: str = "mmtr") -> str:
    """What an entry point prints for ``error`` raised inside it (asserting exit status 2 and one line)."""
    with pytest.raises(SystemExit) as stopped, user_errors(prog, debug=False):
        raise error
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


def corpus() -> Corpus:
    images = tables.images_table(image_columns())
    return Corpus(images, tables.captions_table(caption_columns(), images=images))


def test_disk_full_while_prepare_writes_its_second_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "prepared"
    write_prepared(corpus(), out)
    before = tree_bytes(out)
    with monkeypatch.context() as patch:
        fail_on_call(patch, tables.pq, "write_table", arrow_no_space(), call=2)  # images written, captions not
        with pytest.raises(StorageError) as raised:
            write_prepared(corpus(), out)
    assert str(raised.value) == f"cannot write {out}/captions.parquet: {NO_SPACE}"
    assert one_line(raised.value, capsys) == f"mmtr: error: cannot write {out}/captions.parquet: {NO_SPACE}"
    assert tree_bytes(out) == before and hidden(tmp_path) == []
    write_prepared(corpus(), out)  # the disk has room again
    assert tree_bytes(out) == before and hidden(tmp_path) == []


def test_disk_full_while_a_retrieval_checkpoint_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, config = toy("san")
    save(tmp_path / "model", model, config)
    before = tree_bytes(tmp_path)
    with monkeypatch.context() as patch:
        fail_on_call(patch, checkpoints, "save_file", safetensors_fault(errno.ENOSPC))
        with pytest.raises(StorageError) as raised:
            save(tmp_path / "model", model, config)
    assert str(raised.value) == f"cannot write {tmp_path}/model.safetensors: {NO_SPACE}"
    assert tree_bytes(tmp_path) == before and hidden(tmp_path) == []
    save(tmp_path / "model", model, config)
    assert tree_bytes(tmp_path) == before and hidden(tmp_path) == []


def test_disk_full_while_a_resume_state_is_written_keeps_the_previous_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    point = ResumePoint(state_file(tmp_path / "san-none-all", "seed-0"), fingerprint("san"))
    point.save({"epoch": 1, "weights": torch.zeros(4)})
    before = tree_bytes(tmp_path)
    with monkeypatch.context() as patch:
        fail_on_call(patch, tensor_tree, "save_file", safetensors_fault(errno.ENOSPC))
        with pytest.raises(StorageError) as raised:
            point.save({"epoch": 2, "weights": torch.ones(4)})
    assert str(raised.value) == f"cannot write {point.path}: {NO_SPACE}"
    assert tree_bytes(tmp_path) == before and hidden(tmp_path) == []
    state = point.load()
    assert state is not None and state["epoch"] == 1  # a rerun resumes after the last epoch that was written


def test_quota_exceeded_while_an_mmt_checkpoint_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The older safetensors wording of the same fault (``IoError(Os { code: 122, ... })``)."""
    with monkeypatch.context() as patch:
        quota = SafetensorError(
            "Error while serializing: IoError(Os { code: 122, kind: FilesystemQuotaExceeded, "
            'message: "Disk quota exceeded" })'
        )
        fail_on_call(patch, checkpoints, "save_file", quota)
        with pytest.raises(StorageError) as raised:
            save_mmt(tmp_path / "mmt-en-de" / "finetune", new_model(seed=1), extra={"step": 1})
    assert (
        str(raised.value) == f"cannot write {tmp_path}/mmt-en-de/finetune.safetensors: [Errno 122] Disk quota exceeded"
    )
    assert [path.name for path in (tmp_path / "mmt-en-de").iterdir()] == []


def test_disk_full_while_the_checkpoint_fields_are_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second file of the pair: the weights are renamed in already, the JSON is not; the pair is refused on
    read (the hash it records does not match), never taken for the earlier checkpoint."""
    model, config = toy("san")
    with monkeypatch.context() as patch:
        fail_on_call(patch, Path, "write_bytes", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        with pytest.raises(StorageError, match=f"^cannot write {tmp_path}/model.json: .Errno 28. No space"):
            save(tmp_path / "model", model, config)
    assert hidden(tmp_path) == []


def test_disk_full_while_metrics_json_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = tmp_path / "metrics" / "san-none-all.json"
    write_json(metrics, {"rsum": 1.5})
    with monkeypatch.context() as patch:
        fail_on_call(patch, Path, "write_bytes", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        with pytest.raises(StorageError) as raised:
            write_json(metrics, {"rsum": 2.5})
    assert str(raised.value) == f"cannot write {metrics}: {NO_SPACE}"
    assert metrics.read_text() == '{\n  "rsum": 1.5\n}\n' and hidden(tmp_path) == []


def test_disk_full_while_a_feature_store_writes_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "store"
    _write_store(out)
    before = tree_bytes(out)
    with monkeypatch.context() as patch:
        fail_on_call(patch, os, "pwrite", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), call=3)
        with pytest.raises(StorageError) as raised:
            _write_store(out)
    assert str(raised.value) == f"cannot write {out}: {NO_SPACE}"
    assert tree_bytes(out) == before and hidden(tmp_path) == []
    _write_store(out)
    assert tree_bytes(out) == before


def test_disk_full_while_a_feature_store_writes_its_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "store"
    with monkeypatch.context() as patch:
        fail_on_call(patch, store.pq, "write_table", arrow_no_space())
        with pytest.raises(StorageError, match=f"^cannot write {out}: .Errno 28. No space left on device$"):
            _write_store(out)
    assert not out.exists() and hidden(tmp_path) == []


@pytest.mark.parametrize(
    ("number", "words"), [(errno.EROFS, "Read-only file system"), (errno.EACCES, "Permission denied")]
)
def test_an_output_folder_that_refuses_new_files(
    number: int, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "prepared"
    write_prepared(corpus(), out)
    before = tree_bytes(out)
    with monkeypatch.context() as patch:
        refuse_new_files_in(patch, tmp_path, number)
        with pytest.raises(StorageError) as folder:
            write_prepared(corpus(), out)
        with pytest.raises(StorageError) as file:
            write_json(tmp_path / "metrics.json", {"a": 1})
    assert one_line(folder.value, capsys) == f"mmtr: error: cannot write {out}: [Errno {number}] {words}"
    assert str(file.value) == f"cannot write {tmp_path}/metrics.json: [Errno {number}] {words}"
    assert tree_bytes(out) == before and hidden(tmp_path) == []


def test_an_output_folder_that_cannot_be_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_new_files_in(monkeypatch, tmp_path, errno.EACCES)
    with pytest.raises(StorageError) as raised:
        write_json(tmp_path / "metrics" / "retrieval" / "san.json", {"a": 1})
    assert str(raised.value) == f"cannot write {tmp_path}/metrics/retrieval/san.json: [Errno 13] Permission denied"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_real_read_only_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_json(tmp_path / "metrics.json", {"a": 1})
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(StorageError) as raised:
            write_json(tmp_path / "metrics.json", {"a": 2})
    finally:
        tmp_path.chmod(0o755)
    assert (
        one_line(raised.value, capsys)
        == f"mmtr: error: cannot write {tmp_path}/metrics.json: [Errno 13] Permission denied"
    )
    assert (tmp_path / "metrics.json").read_text() == '{\n  "a": 1\n}\n' and hidden(tmp_path) == []


def test_an_input_file_without_read_permission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    captions = tmp_path / "train.en"
    captions.write_text("a dog\n")
    real = Path.read_bytes

    def unreadable(path: Path) -> bytes:
        if path == captions:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path)

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    with pytest.raises(PermissionError) as raised:
        read_lines(captions)
    assert one_line(raised.value, capsys) == f"mmtr: error: cannot access {captions}: [Errno 13] Permission denied"


def test_an_unreadable_input_inside_a_write_is_named_not_the_output(tmp_path: Path) -> None:
    """A fault on a file read while an output is written names that file, not the output."""
    source = tmp_path / "source.txt"
    denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(source))
    with pytest.raises(PermissionError) as raised, atomic_dir(tmp_path / "out"):
        raise denied
    assert raised.value is denied and resource_fault(denied) is not None
    assert str(resource_fault(denied)) == f"cannot access {source}: [Errno 13] Permission denied"
    assert list(tmp_path.iterdir()) == []


def test_a_fault_in_a_staged_system_folder_names_the_file_it_hit(tmp_path: Path) -> None:
    models = tmp_path / "models"
    with pytest.raises(StorageError) as raised, staged_children(models) as staged:
        (staged / "mmt-en-de").mkdir()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(staged / "mmt-en-de" / "src.model"))
    assert str(raised.value) == f"cannot write {models}/mmt-en-de/src.model: {NO_SPACE}"
    assert list(models.iterdir()) == []


def test_a_swap_that_fails_halfway_puts_the_previous_output_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "store"
    with atomic_dir(out) as tmp:
        (tmp / "old.txt").write_text("old")
    fail = [False]
    real_replace = os.replace

    def replace(source: Any, destination: Any) -> None:
        if fail[0] and Path(destination) == out and Path(source).parent == tmp_path:  # the new folder, once
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(source))
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", replace)
    with (
        pytest.raises(StorageError, match=f"^cannot write {out}: .Errno 5. Input/output error$"),
        atomic_dir(out) as tmp,
    ):
        (tmp / "new.txt").write_text("new")
        fail[0] = True
    assert tree_bytes(out) == {"old.txt": b"old"} and hidden(tmp_path) == []


def test_debug_shows_the_traceback_and_other_os_errors_stay_bugs(capsys: pytest.CaptureFixture[str]) -> None:
    fault = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "data/work/x.parquet")
    with pytest.raises(OSError) as raised, user_errors("mmtr", debug=True):
        raise fault
    assert raised.value is fault
    bad_descriptor = OSError(errno.EBADF, os.strerror(errno.EBADF))  # a bug of ours, not the machine's refusal
    with pytest.raises(OSError) as raised, user_errors("mmtr", debug=False):
        raise bad_descriptor
    assert raised.value is bad_descriptor and capsys.readouterr().err == ""
    assert resource_fault(RuntimeError("(os error 28)")) is None  # only OS errors and the writers' wrappers
    assert one_line(fault, capsys) == f"mmtr: error: cannot access data/work/x.parquet: {NO_SPACE}"


def test_the_temporaries_of_a_write_are_gone_after_every_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the writer raised (an OS error, the writer library's own type, or a stop signal), nothing hidden
    stays beside the output."""
    array = np.arange(4)
    for error in (arrow_no_space(), safetensors_fault(errno.ENOSPC), KeyboardInterrupt()):
        with pytest.raises((StorageError, KeyboardInterrupt)), atomic_dir(tmp_path / "out") as tmp:
            np.save(tmp / "a.npy", array)
            fd, _ = tempfile.mkstemp(dir=tmp)
            os.close(fd)
            raise error
        assert list(tmp_path.iterdir()) == []
