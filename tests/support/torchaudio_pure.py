"""torchaudio without its native libraries, for the tests' references: its ``Resample`` is
plain torch code, the resampler vLLM 0.32 uses by default. ``scripts/setup-env`` installs it
beside the virtual environment's site-packages (``<venv>/torchaudio-pure``); put
:data:`TORCHAUDIO_PURE` on ``sys.path`` or a process's ``PYTHONPATH`` where it is needed."""

from __future__ import annotations

import pathlib
import sys

TORCHAUDIO_PURE = pathlib.Path(sys.prefix) / "torchaudio-pure"
"""The folder holding the ``torchaudio`` package."""


def available() -> bool:
    """Whether the install is there (``scripts/setup-env`` made it)."""
    return (TORCHAUDIO_PURE / "torchaudio" / "__init__.py").is_file()
