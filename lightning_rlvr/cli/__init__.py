"""``lightning-rlvr``: LightningCLI with this project's model, data, checkpoint and error handling.

Layer: ``cli``, the top of the library (``experiments`` alone sits above). ``app`` holds the CLI and its
one-line errors, ``options`` the help layout and where ``test`` logs; ``python -m lightning_rlvr.cli``
runs ``main``.
"""

from __future__ import annotations

from .app import RLVRCLI, main, run, user_error_message

__all__ = ["RLVRCLI", "main", "run", "user_error_message"]
