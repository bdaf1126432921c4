"""Which rollout engine a run uses when ``model.engine`` is not given, and the line that says so.

``FastEngine`` samples the tokens ``HFGenerateEngine`` samples (the same random numbers, the same
sampling order; see ``fast.py``), faster, for the policies it supports: those it can read into its
fused weights (``fast.llama_weights``: Llama-style, SiLU MLP, LoRA or not). So it is the default
wherever ``llama_weights`` accepts the policy, and ``HFGenerateEngine`` (any causal LM) everywhere
else, with the reason. Either is one flag away: ``--model.engine
lightning_rlvr.engines.hf.HFGenerateEngine`` (or ``--config configs/engine/hf.yaml``), or
``configs/engine/fast.yaml``; an engine given in the config is used as given.
"""

from __future__ import annotations

from ..core.errors import RLVRError
from .base import RolloutEngine

FLAG = "--model.engine lightning_rlvr.engines.{}"


def default_engine(model) -> tuple[RolloutEngine, str]:
    """The engine for ``model`` when none is given, and one line naming it and why."""
    from .fast import FastEngine, llama_weights
    from .hf import HFGenerateEngine

    try:
        llama_weights(model)  # the one home of what FastEngine reads; raises RLVRError otherwise
    except (RLVRError, AttributeError) as err:  # not Llama-style, or laid out unlike one
        why = str(err).split(";")[0] if isinstance(err, RLVRError) else f"FastEngine cannot read it: {err}"
        line = (
            f"model.engine: HFGenerateEngine (chosen: {why}); "
            f"FastEngine cannot sample this policy, vLLM: {FLAG.format('vllm.VLLMEngine')}"
        )
        return HFGenerateEngine(), line
    kind = getattr(model.config, "model_type", "llama")
    line = (
        f"model.engine: FastEngine (chosen: it samples what generate samples, faster, for this {kind} "
        f"policy); generate instead: {FLAG.format('hf.HFGenerateEngine')}"
    )
    return FastEngine(), line
