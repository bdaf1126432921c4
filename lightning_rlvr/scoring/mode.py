"""Scoring mode: no gradients and the model in eval mode, and whether train mode computes the same.

Layer: scoring (imports only torch). The ``Scorer``'s methods run in ``scoring_mode`` (``_scoring``);
the update asks ``train_mode_matches_eval`` before it lets its own forward stand in for the scorer's.
"""

from __future__ import annotations

import contextlib
import functools

import torch


@contextlib.contextmanager
def scoring_mode(model):
    """No gradients and ``model`` in eval mode (no dropout), restored afterwards."""
    was_training = getattr(model, "training", False)  # test doubles need not be Modules
    if was_training:
        model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training:
            model.train()


def _scoring(method):
    """A ``Scorer`` method run in ``scoring_mode`` of its model."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with scoring_mode(self.model):
            return method(self, *args, **kwargs)

    return wrapper


def train_mode_matches_eval(model) -> bool:
    """Whether ``model`` computes the same function in train mode as in eval mode (no dropout).

    The scorer runs the policy in eval mode, the update in train mode; only when they agree
    can the update's forward stand in for the scorer's. Checks ``nn.Dropout`` modules and the
    config's dropout rates (Hugging Face attention passes ``attention_dropout`` to SDPA
    directly, with no module): any rate above 0 says no.
    """
    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()):
        return False
    config = getattr(model, "config", None)
    rates = [v for k, v in (vars(config) if config is not None else {}).items() if "drop" in k.lower()]
    return not any(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in rates)
