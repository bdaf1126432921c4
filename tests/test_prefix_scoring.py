"""Shared-prefix scoring (``prefix_scoring.py``) gives what whole sequences give, on a real tiny Llama.

The whole-sequence path of ``Scorer`` is the reference (``prefix_cache = False``); the
prefix path must match it to float rounding for every class of input the methods send:
contexts shared by several views and distinct ones, identical views, spans that start
late or end early, cuts anywhere inside a prefix (RREDCoT's values), teacher top-k.
"""

from __future__ import annotations

import pytest
import torch

from lightning_rlvr.core.tensors import left_pad
from lightning_rlvr.credit.self_conditioned import generalized_jsd, kl_divergence
from lightning_rlvr.models import TinyPolicy
from lightning_rlvr.scoring.packing import causal_lm_forward
from lightning_rlvr.scoring.prefix_scoring import suffix_logits, supports_prefix_cache
from lightning_rlvr.scoring.scorer import Scorer
from lightning_rlvr.scoring.teacher import TeacherScorer
from tests.rollouts import rollout_from_ids

SHAPE = dict(layers=2, hidden=32, heads=2, intermediate=64, max_positions=64)


@pytest.fixture(scope="module")
def model_and_vocab():
    model, tokenizer = TinyPolicy(**SHAPE, seed=3).load()
    return model.eval(), len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id


def random_rollout(V: int, pad: int, eos: int, seed: int, G: int = 4, groups: int = 2):
    """Prompts shared within a group, completions of random lengths, two rows duplicated."""
    g = torch.Generator().manual_seed(seed)
    word = lambda n: (torch.randint(3, V, (n,), generator=g)).tolist()  # noqa: E731 - no pad/eos
    prompts, completions = [], []
    for _ in range(groups):
        prompt = word(int(torch.randint(2, 6, (1,), generator=g)))
        for _ in range(G):
            prompts.append(prompt)
            completions.append(word(int(torch.randint(1, 9, (1,), generator=g))) + [eos])
    completions[1] = list(completions[0])  # an identical row: deduplicated, must still come out right
    return rollout_from_ids(prompts, completions, pad=pad, eos=eos)


def scorers(model, rollout, **kw):
    fast, slow = Scorer(model, rollout, **kw), Scorer(model, rollout, **kw)
    fast.prefix_cache, slow.prefix_cache = True, False
    return fast, slow


def test_suffix_logits_match_whole_sequences_at_any_cut(model_and_vocab):
    model, V, pad, _ = model_and_vocab
    g = torch.Generator().manual_seed(0)
    prefixes = [torch.randint(3, V, (n,), generator=g) for n in (6, 9, 1)]
    items = [
        (p, k, torch.randint(3, V, (s,), generator=g))
        for p, k, s in [(0, 6, 4), (1, 3, 5), (1, 9, 1), (2, 1, 3)]
    ]
    items += [items[1], (0, 2, torch.zeros(0, dtype=torch.long))]  # a duplicate, an empty suffix
    with torch.no_grad():
        out, tokens = suffix_logits(model, prefixes, items, pad)
        for j, (p, k, s) in enumerate(items):
            seq = torch.cat([prefixes[p][:k], s])
            ids, mask = left_pad([seq, torch.cat([seq, seq])], pad)  # padded, as in a real batch
            L = ids.shape[1]
            ref = causal_lm_forward(model, ids, mask).logits[0, L - len(s) - 1 : L - 1]
            torch.testing.assert_close(out[j, : len(s)], ref, rtol=1e-5, atol=1e-5)
    # each distinct prefix once, each distinct suffix once (+ its re-fed token)
    assert tokens == sum(len(p) for p in prefixes) + sum(len(s) + 1 for _, _, s in items[:4] + items[5:])
    assert supports_prefix_cache(model)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("micro_batch_size", [3, 64])
def test_compare_with_shared_contexts_matches_whole_sequences(model_and_vocab, seed, micro_batch_size):
    model, V, pad, eos = model_and_vocab
    rollout = random_rollout(V, pad, eos, seed)
    N, lengths = rollout.num_rows, rollout.lengths.tolist()
    g = torch.Generator().manual_seed(seed + 10)
    shared = torch.randint(3, V, (7,), generator=g)
    rows = list(range(N)) + [2]  # row 2 scored twice: the last view wins, on both paths
    contexts = [shared if i % 2 else torch.randint(3, V, (3 + i % 4,), generator=g) for i in rows]
    spans = [(min(1, lengths[i] - 1), lengths[i]) if i % 3 else (0, max(1, lengths[i] - 2)) for i in rows]
    fast, slow = scorers(model, rollout, micro_batch_size=micro_batch_size)
    for fn in (kl_divergence, lambda t, s: generalized_jsd(t, s, 0.5)):
        torch.testing.assert_close(
            fast.compare(contexts, rows, fn, spans),
            slow.compare(contexts, rows, fn, spans),
            rtol=1e-5,
            atol=1e-6,
        )
    (v_fast, k_fast), (v_slow, k_slow) = (
        s.compare(contexts, rows, kl_divergence, teacher_top_k=3) for s in (fast, slow)
    )
    torch.testing.assert_close(v_fast, v_slow, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(k_fast.logp, k_slow.logp, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(k_fast.tail, k_slow.tail, rtol=1e-5, atol=1e-5)
    assert not fast.has_policy_pass  # only the viewed rows' student was scored
    fast, slow = scorers(model, rollout, micro_batch_size=micro_batch_size)  # one call's cost
    fast.compare(contexts, rows, kl_divergence, spans)
    slow.compare(contexts, rows, kl_divergence, spans)
    if micro_batch_size >= len(rows):  # one micro-batch: shared contexts and prompts ran once
        assert fast.forward_tokens < slow.forward_tokens


@pytest.mark.parametrize("prefix_cache", [True, False])
@pytest.mark.parametrize("micro_batch_size", [1, 64])
def test_compare_orders_micro_batches_by_length_but_the_last_view_still_wins(
    model_and_vocab, prefix_cache, micro_batch_size
):
    """Views run in length order (less padding); overlapping views still resolve in the caller's order."""
    model, V, pad, eos = model_and_vocab
    rollout = random_rollout(V, pad, eos, seed=4)
    g = torch.Generator().manual_seed(7)
    long_ctx, short_ctx = torch.randint(3, V, (9,), generator=g), torch.randint(3, V, (2,), generator=g)
    end = int(rollout.lengths[2])
    other = torch.randint(3, V, (5,), generator=g)
    # row 2 is viewed twice over the same span: the short context comes last, yet runs first
    contexts, rows, spans = [long_ctx, other, short_ctx], [2, 0, 2], [(0, end), (0, 1), (0, end)]

    def scorer():
        s = Scorer(model, rollout, micro_batch_size=micro_batch_size)
        s.prefix_cache = prefix_cache
        return s

    both = scorer().compare(contexts, rows, kl_divergence, spans)
    last_only = scorer().compare([short_ctx, other], [2, 0], kl_divergence, spans[1:][::-1])
    first_only = scorer().compare([long_ctx], [2], kl_divergence, spans[:1])
    torch.testing.assert_close(both, last_only, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(both[2, :end], first_only[2, :end])  # the two views really differ


def test_compare_reuses_an_existing_policy_pass_and_teacher_scorer_matches(model_and_vocab):
    model, V, pad, eos = model_and_vocab
    rollout = random_rollout(V, pad, eos, seed=2)
    rows = [0, 3, 5]
    contexts = [torch.tensor([5, 6, 7])] * 3
    fast, slow = scorers(model, rollout)
    fast.policy()  # cached distributions are used as the student
    torch.testing.assert_close(
        fast.compare(contexts, rows, kl_divergence),
        slow.compare(contexts, rows, kl_divergence),
        rtol=1e-5,
        atol=1e-6,
    )
    teacher, _ = TinyPolicy(**SHAPE, seed=4).load()
    out = {}
    for flag in (True, False):
        policy = Scorer(model, rollout)
        policy.prefix_cache = flag
        ts = TeacherScorer(teacher.eval(), policy)
        ts.prefix_cache = flag
        out[flag] = ts.compare(contexts, rows, kl_divergence)
        assert policy.forward_tokens > 0
    torch.testing.assert_close(out[True], out[False], rtol=1e-5, atol=1e-6)


def test_continuation_logprobs_match_sequence_logprobs(model_and_vocab):
    model, V, pad, eos = model_and_vocab
    rollout = random_rollout(V, pad, eos, seed=3)
    g = torch.Generator().manual_seed(5)
    prefixes = [torch.randint(3, V, (n,), generator=g) for n in (8, 5)]
    answer = torch.randint(3, V, (3,), generator=g)
    cue = torch.randint(3, V, (2,), generator=g)
    items = [(p, k, torch.cat([cue, answer])) for p in (0, 1) for k in range(1, len(prefixes[p]) + 1)]
    n_targets = [len(answer)] * len(items)
    fast, slow = scorers(model, rollout, micro_batch_size=4)
    got = fast.continuation_logprobs(prefixes, items, n_targets)
    ref = slow.continuation_logprobs(prefixes, items, n_targets)
    assert [len(x) for x in got] == n_targets
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert fast.forward_tokens < slow.forward_tokens


@pytest.mark.parametrize("last_value_is_reward", [True, False])
def test_rredcot_values_are_those_of_whole_sequences(model_and_vocab, last_value_is_reward):
    """RREDCoT's values V(s_k) for every cut, with each chain run once vs every query run whole."""
    from dataclasses import replace

    from lightning_rlvr.core.problem import Problem
    from lightning_rlvr.credit.rredcot import RREDCoTCredit

    model, V, pad, eos = model_and_vocab
    _, tokenizer = TinyPolicy(**SHAPE).load()
    enc = lambda t: tokenizer(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    g = torch.Generator().manual_seed(6)
    digits = enc("0123456789+")
    semi = enc(";")
    completions = []
    for _ in range(8):  # random digit chains with 0-5 ";" boundaries, then EOS
        toks = [
            digits[int(i)]
            for i in torch.randint(len(digits), (int(torch.randint(4, 14, (1,), generator=g)),), generator=g)
        ]
        for pos in torch.randint(
            1, len(toks), (int(torch.randint(0, 6, (1,), generator=g)),), generator=g
        ).tolist():
            toks[pos] = semi[0]
        completions.append(toks + [eos])
    rollout = rollout_from_ids(
        [enc("12+34"), enc("5+678")],
        completions,
        pad=pad,
        eos=eos,
        group_size=4,
        rewards=[1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0],
    )
    rollout = replace(
        rollout, problems=[Problem(prompt="12+34", answer="46"), Problem(prompt="5+678", answer="683")]
    )
    credit = RREDCoTCredit(num_segments=3, boundary_texts=[";"], keywords=[], answer_cue=" answer:")
    credit.last_value_is_reward = last_value_is_reward
    out = {}
    for flag in (True, False):
        scorer = Scorer(model, rollout, tokenizer, micro_batch_size=5)
        scorer.prefix_cache = flag
        out[flag] = (credit.redistribute(rollout, scorer), scorer.forward_tokens)
    (fast, fast_tokens), (slow, slow_tokens) = out[True], out[False]
    assert fast.active.any() and (fast.num_segments > 1).any()  # real cuts were valued
    torch.testing.assert_close(fast.values, slow.values, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(fast.weights, slow.weights, rtol=1e-4, atol=1e-5)
    assert fast_tokens < slow_tokens
