"""Where the project keeps files between runs.

Layer: ``core`` (imports nothing from the package).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$LIGHTNING_RLVR_CACHE`` or ``~/.cache/lightning_rlvr``: warm starts, dequantized GGUF models."""
    return Path(os.environ.get("LIGHTNING_RLVR_CACHE", Path.home() / ".cache" / "lightning_rlvr"))
