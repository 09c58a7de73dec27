"""What a hostile pickle carries, for the tests that check such a file is never unpickled."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class Payload:
    """Unpickling it would create the file ``ran`` names: a test asserts that file never appears."""

    def __init__(self, ran: Path) -> None:
        self.ran = ran

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.ran,))
