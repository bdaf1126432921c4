"""The scorer's position convention, pinned with a policy whose prediction is a known function of its context.

FakeLM predicts, at every position, a distribution peaked on
``(sum of the real tokens so far + how many there are) % V``. Any off-by-one
in where completion tokens are read, or any leak of padding into the
context, changes the numbers.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from lightning_rlvr.core.rollout import Rollout
from lightning_rlvr.scoring.logprobs import entropy_from_logits
from lightning_rlvr.scoring.scorer import Scorer
from tests.rollouts import rollout_from_ids

V = 8
PAD, EOS = 0, 1


class FakeLM(torch.nn.Module):
    def forward(
        self, input_ids, attention_mask, position_ids=None, output_hidden_states=False, use_cache=False
    ):
        real = input_ids * attention_mask
        key = (real.cumsum(-1) + attention_mask.cumsum(-1)) % V  # [n, L]
        logits = 3.0 * F.one_hot(key, V).float() + 0.1 * position_ids.unsqueeze(-1).float()
        hidden = (key.float().unsqueeze(-1) * torch.ones(1, 1, 4)) if output_hidden_states else None
        return SimpleNamespace(logits=logits, hidden_states=(hidden,) if hidden is not None else None)


def expected_logprobs(context: list[int], tokens: list[int]) -> list[torch.Tensor]:
    """Next-token log-probs for each of ``tokens`` after ``context``, computed one sequence at a time."""
    out = []
    for t in range(len(tokens)):
        seq = context + tokens[:t]
        key = (sum(seq) + len(seq)) % V
        logits = 3.0 * F.one_hot(torch.tensor(key), V).float() + 0.1 * (len(seq) - 1)
        out.append(F.log_softmax(logits, -1))
    return out


def make_rollout(prompts: list[list[int]], completions: list[list[int]]) -> Rollout:
    return rollout_from_ids(prompts, completions, pad=PAD, eos=EOS)


PROMPTS = [[3, 4, 5], [6, 2]]
COMPLETIONS = [[2, 7, 3, EOS], [5, 5, EOS]]


def test_policy_pass_reads_each_completion_token_at_its_own_position():
    rollout = make_rollout(PROMPTS, COMPLETIONS)
    scorer = Scorer(FakeLM(), rollout, micro_batch_size=1)
    logp = scorer.policy().logp
    for i, (p, c) in enumerate(zip(PROMPTS, COMPLETIONS)):
        exp = expected_logprobs(p, c)
        for t, tok in enumerate(c):
            torch.testing.assert_close(logp[i, t], exp[t][tok])


def test_compare_under_own_prompt_gives_zero_divergence():
    rollout = make_rollout(PROMPTS, COMPLETIONS)
    scorer = Scorer(FakeLM(), rollout)
    kl = lambda teacher, student: (teacher.exp() * (teacher - student)).sum(-1)
    d = scorer.compare([torch.tensor(p) for p in PROMPTS], [0, 1], kl)
    torch.testing.assert_close(d, torch.zeros_like(d))


def test_compare_scores_the_same_tokens_under_another_context():
    rollout = make_rollout(PROMPTS, COMPLETIONS)
    scorer = Scorer(FakeLM(), rollout, micro_batch_size=2, cache_bytes=0)  # no cache: recompute students
    contexts = [torch.tensor([7, 7, 1, 2, 3]), torch.tensor([4])]
    teacher = scorer.compare(contexts, [1, 0], lambda t, s: t, spans=[(1, 3), (0, 4)])  # [N, T, V]
    for row, ctx, (start, end) in [(1, [7, 7, 1, 2, 3], (1, 3)), (0, [4], (0, 4))]:
        exp = expected_logprobs(ctx, COMPLETIONS[row])
        for t in range(start, end):
            torch.testing.assert_close(teacher[row, t], exp[t])
    assert torch.equal(teacher[1, 0], torch.zeros(V))  # outside the span stays 0
    student = scorer.compare(contexts, [1, 0], lambda t, s: s)
    for row in (0, 1):
        exp = expected_logprobs(PROMPTS[row], COMPLETIONS[row])
        for t in range(len(COMPLETIONS[row])):
            torch.testing.assert_close(student[row, t], exp[t])


def test_sequence_logprobs_of_trailing_targets():
    rollout = make_rollout(PROMPTS, COMPLETIONS)
    scorer = Scorer(FakeLM(), rollout)
    seqs = [torch.tensor([3, 4, 5, 6, 2]), torch.tensor([1, 2])]
    got = scorer.sequence_logprobs(seqs, [2, 1])
    exp0 = expected_logprobs([3, 4, 5], [6, 2])
    torch.testing.assert_close(got[0], torch.stack([exp0[0][6], exp0[1][2]]))
    torch.testing.assert_close(got[1], expected_logprobs([1], [2])[0][2].reshape(1))


def test_hidden_states_align_with_log_probs():
    rollout = make_rollout(PROMPTS, COMPLETIONS)
    hidden = Scorer(FakeLM(), rollout).policy(hidden=True).hidden  # [N, T, 4]
    seq = PROMPTS[1]  # the state that predicts completion token 0 is the last prompt position
    assert hidden[1, 0, 0].item() == (sum(seq) + len(seq)) % V


def test_scoring_runs_in_eval_mode_and_restores_training_mode():
    modes = []

    class ModeSpy(FakeLM):
        def forward(self, *args, **kwargs):
            modes.append(self.training)
            return super().forward(*args, **kwargs)

    model = ModeSpy().train()
    scorer = Scorer(model, make_rollout(PROMPTS, COMPLETIONS))
    scorer.policy()
    scorer.sequence_logprobs([torch.tensor([3, 4])], [1])
    assert modes and not any(modes)  # dropout off while scoring
    assert model.training  # and the update finds the model as it was


@pytest.mark.parametrize("masked", [1, 3, 5])  # -inf logits: masked tokens (top-k, grammar, vocab padding)
def test_entropy_counts_minus_inf_logits_as_zero_probability(masked):
    torch.manual_seed(masked)
    logits = torch.randn(2, 4, 6)  # [N, T, V]
    logits[..., :masked] = float("-inf")
    got = entropy_from_logits(logits)
    p = torch.softmax(logits[..., masked:], dim=-1)  # the same distribution without the masked tokens
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, -(p * p.log()).sum(-1))
    one_hot = torch.full((3, 5), float("-inf")).scatter(-1, torch.tensor([[0], [2], [4]]), 0.0)
    assert entropy_from_logits(one_hot).tolist() == [0.0, 0.0, 0.0]  # a certain next token: exactly 0


def test_the_policy_pass_runs_each_shared_prompt_once_and_gives_the_per_row_answer():
    """With a KV-cache model the policy pass shares each group's prompt (as the update does):
    same log-probs and hidden states as one prompt per row, and fewer tokens through the model."""
    from lightning_rlvr.models import TinyPolicy

    torch.manual_seed(0)
    model, _ = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64).load()
    prompts = [[5, 6, 7, 8]] * 3 + [[9, 10]] * 3  # two groups of G = 3, prompts of different lengths
    completions = [[11, 12, EOS], [13, EOS], [EOS], [14, 15, 16, 17, EOS], [12, EOS], [15, 16, EOS]]
    rollout = make_rollout(prompts, completions)
    shared = Scorer(model, rollout, micro_batch_size=8)
    per_row = Scorer(model, rollout, micro_batch_size=8)
    per_row.prefix_cache = False
    fed: list[int] = []  # token positions through the model, per call
    count = lambda _m, _args, kw: fed.append(kw["input_ids"].numel())  # noqa: E731
    model.register_forward_pre_hook(count, with_kwargs=True)
    a = shared.policy(hidden=True)
    n_shared, fed[:] = sum(fed), []
    b = per_row.policy(hidden=True)
    torch.testing.assert_close(a.logp, b.logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a.hidden, b.hidden, rtol=1e-5, atol=1e-5)
    assert n_shared < sum(fed)  # the prompts ran once per group, not once per row
    n_per_row, fed[:] = sum(fed), []
    switched_off = Scorer(model, rollout, micro_batch_size=8, share_prompts=False)  # the module's switch
    torch.testing.assert_close(switched_off.policy().logp, b.logp, rtol=1e-5, atol=1e-5)
    assert sum(fed) == n_per_row


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_compare_holds_at_most_micro_batch_tokens_of_logits_and_gives_the_same_values(prefix_cache):
    """A token budget splits the views of ``compare`` so no forward returns more than ``micro_batch_tokens``
    padded positions of logits (the [m, L, V] tensors and the [m, S, V] distributions a divergence
    makes from them are what grows with the views); the values do not change."""
    from lightning_rlvr.models import TinyPolicy

    torch.manual_seed(0)
    model, _ = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64).load()
    prompts = [[5, 6, 7, 8]] * 3 + [[9, 10]] * 3
    completions = [[11, 12, EOS], [13, EOS], [EOS], [14, 15, 16, 17, EOS], [12, EOS], [15, 16, EOS]]
    rollout = make_rollout(prompts, completions)
    contexts = [torch.tensor([3 + k % 4, 4, 9, 10][: 2 + k % 3]) for k in range(6)]
    kl = lambda t, s: (t.exp() * (t - s)).sum(-1)  # noqa: E731
    sizes: list[int] = []  # rows x positions of the logits of every forward
    model.register_forward_hook(lambda _m, _a, out: sizes.append(out.logits.shape[0] * out.logits.shape[1]))
    values, largest, calls = {}, {}, {}
    for budget in (None, 8):
        scorer = Scorer(model, rollout, micro_batch_size=64, micro_batch_tokens=budget)
        scorer.prefix_cache = prefix_cache
        scorer.policy()  # the student's distributions are cached: compare runs only the teachers below
        sizes.clear()
        values[budget] = scorer.compare(contexts, list(range(6)), kl)
        largest[budget], calls[budget] = max(sizes), len(sizes)
    torch.testing.assert_close(values[8], values[None], rtol=1e-5, atol=1e-6)
    assert largest[8] < largest[None] and calls[8] > calls[None]
    assert largest[8] <= (8 + 6 if prefix_cache else max(len(c) + 4 for c in contexts))  # one view may exceed
