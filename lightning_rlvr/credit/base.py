"""The plug-in seam: a ``CreditAssigner`` turns a scored rollout into token advantages.

A credit assigner is a Lightning ``Callback``: it is an init argument of
``RLVRModule`` chosen in YAML by ``class_path``, returned from
``configure_callbacks()``, and its ``state_dict`` (baselines, running
statistics) is saved in every checkpoint and restored on resume and on
``test --ckpt_path``. That state can differ per rank (each rank sees its own
prompts and draws its own peers), so the checkpoint keeps every rank's
``state_dict`` in rank order and each rank restores its own (a resume on more
ranks than were saved reuses them cyclically). The module calls it once per step:

    credit = assigner.assign(rollout, scorer)      # Credit.advantages: [N, T]

``rollout`` carries completions, rewards, masks and each row's group index;
``scorer`` runs no-grad passes of the rollout-time policy (log-probs, hidden
states, distributions of the same completion tokens under another context).
Distillation-style methods return a per-token loss in ``Credit.token_loss``
(a closure over what ``assign`` computed), which the module applies inside the
update with gradients on the student's logits; nothing is kept on the assigner.
The term is masked and aggregated like the policy loss (``loss_agg``) unless
``Credit.token_loss_agg`` names another aggregation.

A new method is one new file with a subclass and one YAML; the module never
branches on the method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from lightning.pytorch.callbacks import Callback
from torch import Tensor

from ..core.distributed import gather_objects, rank
from ..core.objectives import group_advantages
from ..core.rollout import Rollout
from ..scoring.scorer import Scorer

TokenLoss = Callable[[Tensor, Tensor], Tensor]
"""``token_loss(logits, rows) -> [m, T]``: an extra per-token loss for minibatch ``rows`` [m].

``logits`` [m, T, V] are the current policy's predictions of the completion tokens of
``rows`` (gradients flow through them). The module adds the result to the policy-gradient
token loss, masked and aggregated the same way, and counts it as the row's training signal.
"""


@dataclass
class Credit:
    """What a credit assigner returns for one step: everything the update needs from the method."""

    advantages: Tensor  # [N, T] token advantages (constants in the loss; 0 on padding)
    metrics: dict[str, float] = field(default_factory=dict)  # logged as ``credit/<name>``
    token_loss: TokenLoss | None = None  # distillation-style methods: a per-token loss term
    token_loss_agg: str | None = None  # its aggregation (``objectives.AGGREGATIONS``); None = the loss's


class CreditAssigner(Callback):
    """Base class. Subclasses implement ``assign``; stateful ones also ``state_dict``/``load_state_dict``
    (Lightning's ``Callback`` defaults save ``{}`` and load nothing).

    Args:
        scale_by_std: divide group-centred rewards by the group's std (GRPO) or not (Dr. GRPO).
    """

    uses_hidden_states = False  # True makes the scorer's policy pass also keep last-layer hidden states
    # True when ``assign`` reads ``Scorer.policy()`` (entropies, log-probs): with one epoch and one minibatch
    # the update's own forwards then serve it (``RLVRModule.fused_policy_pass``), not an extra pass
    uses_policy_pass = False
    # The credit lab's paper claims this method's credit is checked against (``experiments/credit_lab/
    # claims.py``: "shear", "shear_control", "hsd"), declared by the method, never found by its class name
    lab_claims: tuple[str, ...] = ()

    def __init__(self, scale_by_std: bool = True) -> None:
        self.scale_by_std = scale_by_std

    def group_advantages(self, rollout: Rollout) -> Tensor:
        """The sequence-level group advantage A_i of every row: [N]."""
        return group_advantages(rollout.rewards, rollout.group, scale=self.scale_by_std)

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        """Token advantages [N, T] for the rollout (no gradients flow through them)."""
        raise NotImplementedError

    def prepare(self, model, tokenizer, task, device) -> None:
        """Load what the method needs before its first step (default: nothing).

        The module calls it once per fit, after its own warm start, with the policy, its tokenizer,
        the task and the device, so a method never reaches into the module (OPD loads its frozen
        teacher here). Idempotent: a second call keeps what the first loaded.
        """

    # ------------------------------------------------------------------ every rank's state in the checkpoint
    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        """Replace this rank's ``state_dict`` (Lightning keeps rank 0's) by every rank's (a collective)."""
        states = checkpoint.get("callbacks", {})
        if self.state_key in states:
            states[self.state_key] = {PER_RANK: gather_objects(states[self.state_key])}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        """Hand ``load_state_dict`` this rank's entry (Lightning calls it right after this hook)."""
        states = checkpoint.get("callbacks", {})
        if self.state_key in states:
            states[self.state_key] = rank_state(states[self.state_key])


PER_RANK = "per_rank"


def rank_state(entry: dict) -> dict:
    """This rank's assigner state from a checkpoint entry (a plain state dict passes through)."""
    if not isinstance(entry, dict) or PER_RANK not in entry:
        return entry
    states = entry[PER_RANK]
    return states[rank() % len(states)]
