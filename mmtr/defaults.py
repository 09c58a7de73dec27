"""Where ``mmtr search`` and ``mmtr translate`` look when a flag is left out: the folders the pipeline writes, named
as dvc.yaml names them from the params file's `paths` group and corpus roles, and the params' device.

The params file is read when a default is first needed, so a command given every flag reads none. Relative paths in
it are taken from the params file's folder, where DVC runs the stages.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from common.errors import InputError
from mmtr.errors import ParamsError

if TYPE_CHECKING:
    import torch

    from mmtr.params import Params


class Defaults:
    """The defaults that the params file ``params_file`` (``--params``) gives the commands."""

    def __init__(self, params_file: str | Path) -> None:
        self.params_file = Path(params_file)

    @functools.cached_property
    def params(self) -> Params:
        from mmtr.params import load_params

        if not self.params_file.is_file():
            raise ParamsError(
                f"{self.params_file}: file not found; the folders and the device left out on the "
                f"command line come from it (pass --params, or give them)"
            )
        return load_params(self.params_file)

    def path(self, value: str) -> Path:
        """A path of the params file, from the params file's folder."""
        return self.params_file.parent / value

    def retrieval_model(self) -> Path:
        """``<paths.models>/retrieval/<model>-<variant>-<role>``, the first of ``retrieval.models``, ``.variants``
        and ``.roles``."""
        from retrieval.config import run_name

        retrieval = self.params.retrieval
        run = run_name(retrieval.models[0], retrieval.variants[0], retrieval.roles[0])
        folder = self.path(self.params.paths.models) / "retrieval" / run
        return made_by(folder, "retrieval model", f"train_retrieval@{run}", "--model")

    def feature_store(self, flag: str = "--store") -> Path:
        """``<paths.features>/<corpus_roles.target>/<features.extractor>``."""
        target = self.params.corpus_roles.target
        folder = self.path(self.params.paths.features) / target / self.params.features.extractor
        return made_by(folder, "FeatureStore", f"features@{target}", flag)

    def prepared(self) -> Path:
        """``<paths.prepared>/<corpus_roles.target>``."""
        target = self.params.corpus_roles.target
        return made_by(
            self.path(self.params.paths.prepared) / target, "prepared corpus", f"prepare@{target}", "--prepared"
        )

    def images(self) -> Path:
        """``corpora.<corpus_roles.target>.images`` (not checked: the commands print paths under it, never read)."""
        return self.path(self.params.corpus(self.params.corpus_roles.target).images)

    def mmt_models(self) -> Path:
        """``<paths.models>/mmt``, the folder of the trained translation systems."""
        return self.path(self.params.paths.models) / "mmt"

    def mmt_stage(self, src: str, tgt: str) -> str:
        """``train_mmt@<language>``: the stage that trains the systems between ``src`` and ``tgt`` (one is the
        pivot, the other one of ``mmt.targets``)."""
        pivot = self.params.languages.pivot
        return f"train_mmt@{tgt if src == pivot else src}"

    def device(self, given: str | None) -> torch.device:
        """The device ``given`` (``--device``), else the params' ``device``; ``auto``: CUDA when this machine has
        it, else the CPU."""
        from common.checks import SettingError
        from common.runtime import check_device, resolve_device

        name = self.params.device if given is None else given
        try:
            check_device("--device", name)
            return resolve_device(name)
        except SettingError as error:  # only a flag can be malformed: the params file is checked when loaded
            raise InputError(str(error)) from None
        except RuntimeError as error:  # a CUDA device this machine lacks
            raise InputError(str(error) if given is None else f"--device {given}: {error}") from None


def made_by(folder: Path, what: str, stage: str, flag: str) -> Path:
    """``folder``, which the DVC stage ``stage`` writes.

    Raises:
        InputError: the folder is not there; the message names it, the stage that makes it and the flag that
            points elsewhere.
    """
    if not folder.is_dir():
        raise InputError(f"{folder}: no {what} here; the stage {stage} makes it (dvc repro {stage}), or pass {flag}")
    return folder
