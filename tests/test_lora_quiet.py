"""LoRA adapters are applied without transformers' ``is_gradient_checkpointing`` FutureWarning (peft reads
the name transformers 5 deprecated; every LoRA command printed it)."""

from __future__ import annotations

import warnings

from lightning_rlvr.models import TinyPolicy
from lightning_rlvr.models.policies import apply_lora


def test_applying_lora_warns_nothing_about_gradient_checkpointing():
    model, _ = TinyPolicy(layers=1, hidden=16, heads=2, intermediate=32, max_positions=16).load()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapped = apply_lora(model, {"r": 2})
    assert hasattr(wrapped, "peft_config")
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)], caught
    with warnings.catch_warnings(record=True) as caught:  # the filter is narrow: other warnings still show
        warnings.simplefilter("always")
        warnings.warn("something else", FutureWarning, stacklevel=1)
    assert len(caught) == 1
