"""The plug-in seam: a ``CreditAssigner`` turns a scored rollout into token advantages.

A credit assigner is a Lightning ``Callback``: it is an init argument of
``RLVRModule`` chosen in YAML by ``class_path``, returned from
``configure_callbacks()``, and its ``state_dict`` (baselines, running
statistics) is saved in every checkpoint and restored on resume and on
``test --ckpt_path``. The module calls it once per step:

    credit = assigner.assign(rollout, scorer)      # Credit.advantages: [N, T]

``rollout`` carries completions, rewards, masks and each row's group index;
``scorer`` runs no-grad passes of the rollout-time policy (log-probs, hidden
states, distributions of the same completion tokens under another context).
Distillation-style methods add a per-token loss through ``token_loss``, which
the module calls inside the update with gradients on the student's logits.

A new method is one new file with a subclass and one YAML; the module never
branches on the method.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lightning.pytorch.callbacks import Callback
from torch import Tensor

from lightning_rlvr.objectives import group_advantages
from lightning_rlvr.rollout import Rollout
from lightning_rlvr.scoring import Scorer


@dataclass
class Credit:
    """What a credit assigner returns for one step."""

    advantages: Tensor  # [N, T] token advantages (constants in the loss; 0 on padding)
    metrics: dict[str, float] = field(default_factory=dict)  # logged as ``credit/<name>``


class CreditAssigner(Callback):
    """Base class. Subclasses implement ``assign``; stateful ones also ``state_dict``/``load_state_dict``
    (Lightning's ``Callback`` defaults save ``{}`` and load nothing).

    Args:
        scale_by_std: divide group-centred rewards by the group's std (GRPO) or not (Dr. GRPO).
    """

    uses_hidden_states = False  # True makes the scorer's policy pass also keep last-layer hidden states

    def __init__(self, scale_by_std: bool = True) -> None:
        self.scale_by_std = scale_by_std

    def group_advantages(self, rollout: Rollout) -> Tensor:
        """The sequence-level group advantage A_i of every row: [N]."""
        return group_advantages(rollout.rewards, rollout.group, scale=self.scale_by_std)

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        """Token advantages [N, T] for the rollout (no gradients flow through them)."""
        raise NotImplementedError

    def token_loss(self, logits: Tensor, rows: Tensor, rollout: Rollout) -> Tensor | None:
        """Optional extra per-token loss [m, T] for minibatch ``rows``, with gradients through ``logits``.

        ``logits`` [m, T, V] are the current policy's predictions of the completion
        tokens of ``rows``. The module adds the result, masked and aggregated like the
        policy-gradient loss. The default adds nothing.
        """
        return None
