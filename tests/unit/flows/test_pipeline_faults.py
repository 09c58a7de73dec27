"""The pipeline entry point ends a full disk or a read-only folder in one line, as every stage does."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from common.files import write_json
from flows import pipeline
from tests.unit.common.test_hostile_faults import NO_SPACE, fail_on_call, hidden


def test_a_full_disk_while_the_stage_record_is_written_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "work" / "pipeline-stages.json"
    monkeypatch.setattr(pipeline, "update_dvc_yaml", lambda params: "dvc.yaml: as params.yaml gives it")
    # the flow's last write, after `dvc repro` has run
    monkeypatch.setattr(pipeline, "pipeline", lambda targets, force, single_item, path: write_json(path, {}))
    fail_on_call(monkeypatch, Path, "write_bytes", OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(SystemExit) as stopped:
        pipeline.main(["--record", str(record)])
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert err == f"python -m flows.pipeline: error: cannot write {record}: {NO_SPACE}\n"
    assert not record.exists() and hidden(tmp_path) == []


def test_a_read_only_folder_for_the_dag_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refused(params: Path) -> str:
        raise PermissionError(errno.EACCES, "Permission denied", "dvc.yaml")

    monkeypatch.setattr(pipeline, "update_dvc_yaml", refused)
    with pytest.raises(SystemExit) as stopped:
        pipeline.main([])
    assert stopped.value.code == 2
    assert (
        capsys.readouterr().err
        == "python -m flows.pipeline: error: cannot access dvc.yaml: [Errno 13] Permission denied\n"
    )
