"""``python -m lightning_rlvr.cli``: the same as ``lightning-rlvr``."""

from __future__ import annotations

from .app import main

if __name__ == "__main__":
    main()
