"""The rollout engine seam: how completions are sampled, behind one small interface.

Everything that samples (the module's rollouts, evaluation, the warm start's
accuracy checks, the credit lab's view) goes through ``lightning_rlvr.collect.single_turn.generate_rollout``,
which renders and tokenises the prompts once, the same way everywhere, and hands
the engine a batch of token *contexts*. An engine never sees a ``Problem``: a
context is any left-padded token sequence (a prompt, or a prompt plus earlier
turns), so multi-turn rollouts can continue from arbitrary token states with
the same call.

An engine returns the completion ids (right-padded with ``pad_id`` after the first
EOS) and, when it computes them anyway, its own per-token log-probs of the sampled
tokens (``Rollout.engine_logp``; used to correct for sampler/trainer mismatch).
Engines that keep their own copy of the weights (vLLM) refresh it in
``sync_weights``, which the module calls after every optimiser step; engines that
read the live policy (``HFGenerateEngine``, ``FastEngine``) need nothing there.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class Sampling:
    """How to draw tokens (the module's sampling arguments, in one place).

    Args:
        max_new_tokens: completion budget.
        temperature: softmax temperature.
        top_p: nucleus threshold (1.0 = off).
        top_k: top-k (0 = off).
        do_sample: False for greedy decoding.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    do_sample: bool = True


@dataclass
class Generation:
    """What an engine returns for N = B * n rows (row ``i`` continues context ``i // n``)."""

    completion_ids: Tensor  # [N, T] right-padded with pad_id after the first EOS
    logp: Tensor | None = None  # [N, T] log-prob of each sampled token under the engine's model (T = 1)


class RolloutEngine:
    """Base class: ``generate`` completions for token contexts; ``sync_weights`` after each update.

    ``model`` is the live policy (possibly LoRA-wrapped or FSDP-sharded); engines
    that hold their own weights may ignore it after their first call. ``keys`` (one integer a
    row, N = B * n) asks for keyed sampling: row ``i`` draws from its own stream seeded by
    ``keys[i]`` (``core.rng.RowStreams``), not from the global RNG; engines that can set
    ``supports_keys``.
    """

    supports_keys: bool = False

    def generate(
        self,
        model,
        context_ids: Tensor,  # [B, P] left-padded token contexts
        context_mask: Tensor,  # [B, P] 1 on real tokens
        n: int,
        sampling: Sampling,
        pad_id: int,
        eos_id: int,
        keys: list[int] | None = None,
    ) -> Generation:
        raise NotImplementedError

    def sync_weights(self, model) -> None:
        """Called after every optimiser step; a no-op for engines that read the live weights."""
