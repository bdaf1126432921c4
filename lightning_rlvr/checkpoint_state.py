"""The checkpoint half of ``RLVRModule``: what a checkpoint holds beyond Lightning's own state.

Layer: beside ``module`` (a mixin the module inherits). A checkpoint carries the RL step, the verifier
error count, the RNG state and the keyed-sampling seed (``rlvr``), so a resume continues the exact random
stream, and keyed rows (``model.sampling_key: keyed``) keep the run's seed whatever seed the resuming
process was given.

LoRA checkpoints hold the adapters and the trainable state, not the frozen base: with ``model.lora``
and no warm start, the base is exactly what ``model.policy`` loads (a hub directory, or a GGUF file's
cached float copy), so the frozen weights are left out (SmolLM2-135M: 568 MB -> a few MB) and the key
``rlvr.base`` records it. ``resume``, ``test`` and ``export`` rebuild the module from the checkpoint's
hyperparameters, which load the same base, and the missing frozen keys are filled from it before the
state dict is restored. With a warm start the base was trained before LoRA, so the whole model is kept.

Before anything is restored the checkpoint's weights are compared with the model its settings build
(``weight_mismatches``): a parameter of another shape, or one that only one side has, is one
``RLVRError`` line instead of a ``load_state_dict`` traceback (``cli/ckpt_settings.py`` names the flag
that caused it; ``export`` and the credit lab, which take no model flags, get this line).
"""

from __future__ import annotations

from typing import Any

from .core.errors import RLVRError
from .core.resume_state import capture_rng
from .credit.base import rank_state


def _shape(value: Any) -> list[int]:
    return list(getattr(value, "shape", ()))


def weight_mismatches(built: dict[str, Any], saved: dict[str, Any], *, shown: int = 2) -> list[str]:
    """What keeps ``saved`` (a checkpoint's state dict) from loading into a model whose state dict is
    ``built``: parameters of another shape, and parameters only one side has; [] when it fits."""
    out = [
        f"{key} is {_shape(saved[key])} in the checkpoint, {_shape(built[key])} here"
        for key in built
        if key in saved and _shape(saved[key]) != _shape(built[key])
    ][:shown]
    for keys, what in (
        ([k for k in built if k not in saved], "parameters the checkpoint lacks"),
        ([k for k in saved if k not in built], "checkpoint parameters this model lacks"),
    ):
        if keys:
            more = ", ..." if len(keys) > shown else ""
            out.append(f"{len(keys)} {what} ({', '.join(keys[:shown])}{more})")
    return out


class CheckpointState:
    """``on_save_checkpoint`` / ``on_load_checkpoint`` (a mixin: it uses the module's model and counters)."""

    def frozen_base_keys(self) -> list[str]:
        """State-dict keys of the frozen base a checkpoint leaves out (LoRA without warm start only)."""
        if not self.lora or self.warm_start is not None or not hasattr(self.model, "disable_adapter"):
            return []
        trainable = {f"model.{n}" for n, p in self.model.named_parameters() if p.requires_grad}
        return [k for k in self.state_dict() if k.startswith("model.") and k not in trainable]

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["rlvr"] = {
            "rl_step": self.rl_step,
            "verifier_errors": self.verifier_errors,
            "rng": capture_rng(),
            "sampling_seed": self.sampling_seed,
        }
        frozen = self.frozen_base_keys()
        if frozen:
            for key in frozen:
                checkpoint["state_dict"].pop(key, None)
            checkpoint["rlvr"]["base"] = self.policy_source.cache_key()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("rlvr", {})
        self.rl_step = state.get("rl_step", 0)
        self.verifier_errors = state.get("verifier_errors", 0)
        self._pending_rng = state.get("rng")
        # keyed rows keep the run's seed; a checkpoint saved before it was recorded keeps this process's
        self.sampling_seed = state.get("sampling_seed", self.sampling_seed)
        if "base" in state:  # a LoRA checkpoint without the frozen base: take it from the loaded policy
            own, saved = self.state_dict(), checkpoint["state_dict"]
            saved.update({k: own[k] for k in self.frozen_base_keys() if k not in saved})
        # a sharded (FSDP) checkpoint holds no full state_dict here: its shards load through the strategy
        problems = (
            weight_mismatches(self.state_dict(), checkpoint["state_dict"])
            if "state_dict" in checkpoint
            else []
        )
        if problems:
            raise RLVRError(
                f"the checkpoint's weights do not fit the model its settings build ({'; '.join(problems)}): "
                "its model.policy now loads another model than it was trained from; load it where its "
                "policy source (hub id, directory or GGUF file) is the one it was trained with"
            )
        credit_state = checkpoint.get("callbacks", {}).get(self.credit.state_key)
        if credit_state is not None:  # Lightning restores callbacks only when fitting; test needs it too
            self.credit.load_state_dict(rank_state(credit_state))
