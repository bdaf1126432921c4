"""Multi-turn rollouts: the policy acts, the environment answers, until done or the turn limit.

``run_episodes`` plays ``group_size`` episodes of each problem. All live episodes step together: each
turn makes one ``generate`` call over every live episode's context (prompt plus the interaction so
far), and the policy writes one action per episode. The environment's observation is appended to the
episode's tokens and the next turn starts from there. The result is an ordinary ``Rollout``:

- ``prompt_ids`` is the rendered first observation (left-padded, as for a single-turn task);
- ``completion_ids`` is the whole interaction after it, actions and observations, right-padded;
- ``completion_mask`` is 1 on every real token (the model must attend to the observations);
- ``policy_mask`` is 1 only on the tokens the policy generated: loss and credit apply there, and
  observation tokens get no loss, no credit and zero advantage;
- ``turn_index`` gives each token's turn (an action and the observation that answers it share one;
  -1 on padding), so per-turn boundaries are where it changes;
- ``rewards``, ``correct`` and ``feedback`` come from the episode's final ``Verdict``.

The observation after the last action is not appended (nothing the policy does follows it); it is in
the verdict's feedback. A single-turn task is the case ``max_turns=1`` with no observation at all,
so later stages never need to know which kind of rollout they read.

``generate(contexts) -> actions`` is the one seam to the sampler: it gets token-id lists and returns
one action per context (token ids, ending at EOS or a stop token, or cut at the budget). The rollout
engine plugs in there (``engine_generate``; with ``HFGenerateEngine`` for a plain Hugging Face model).
With ``keys`` (keyed sampling: one seed a row, ``single_turn.row_keys``) it is called as
``generate(contexts, turn_keys)``, each live row's action drawn from its own stream seeded by its key and
the turn, so an episode's actions depend on (seed, step, game, sample, turn) alone: not on which other
episodes are still live, how many, or in what order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from ..core.problem import Problem, Verdict
from ..core.rng import key_seed
from ..core.rollout import Rollout, concat_rollouts
from ..core.tensors import left_pad
from ..engines.base import RolloutEngine, Sampling
from ..envs.base import Environment, safe_reset, safe_step

Generate = Callable[..., list[list[int]]]  # (contexts[, one key a context]) -> one action a context


def action_text(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> str:
    """The command an action's tokens spell: decoded, special tokens dropped, first line, stripped."""
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def run_episodes(
    env: Environment,
    problems: list[Problem],
    group_size: int,
    generate: Generate,
    tokenizer: PreTrainedTokenizerBase,
    max_turns: int | None = None,
    max_new_tokens_per_turn: int = 16,
    render: Callable[[str], str] | None = None,
    observation_format: str = "{observation}\n",
    max_context_tokens: int | None = None,
    keys: list[int] | None = None,
) -> Rollout:
    """``group_size`` episodes of each problem, stepped together; rows laid out group by group.

    Args:
        env: the environment; each row plays on its own ``env.clone()``.
        problems: B problems (games).
        group_size: G episodes per problem (N = B * G rows).
        generate: one action (token ids) per context; called once per turn over all live episodes.
        tokenizer: encodes observations and decodes actions (``pad``/``eos`` ids come from it).
        max_turns: turn limit (default ``env.max_turns``).
        max_new_tokens_per_turn: an action longer than this is cut (the generator should stop there).
        render: turns the first observation into the prompt text (e.g. a chat template).
        observation_format: how an observation is written into the interaction after an action.
        max_context_tokens: end an episode (as at the turn limit) once its context reaches this length
            or the next turn (observation plus a full action) would not fit under it, so it still
            fits the model's positions; None for no limit.
        keys: one seed a row (N of them) for keyed sampling; None draws from the global stream.
    """
    max_turns = env.max_turns if max_turns is None else max_turns
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    rows = [p for p in problems for _ in range(group_size)]  # row i plays problems[i // G]
    envs = [env.clone() for _ in rows]
    first = [safe_reset(e, p) for e, p in zip(envs, rows)]
    prompts = [_encode(tokenizer, render(o) if render else o) for o in first]
    tokens: list[list[int]] = [[] for _ in rows]  # the interaction after the prompt
    policy: list[list[int]] = [[] for _ in rows]
    turns: list[list[int]] = [[] for _ in rows]
    verdicts: list[Verdict | None] = [None for _ in rows]
    invalid = [0 for _ in rows]  # actions the environment says it could not carry out
    try:
        for turn in range(max_turns):
            live = [i for i, v in enumerate(verdicts) if v is None]
            if not live:
                break
            contexts = [prompts[i] + tokens[i] for i in live]
            if keys is None:
                actions = generate(contexts)
            else:  # each row's turn has its own stream: the same whoever else is still playing
                actions = generate(contexts, [key_seed(keys[i], turn) for i in live])
            if len(actions) != len(live):
                raise ValueError(f"generate returned {len(actions)} actions for {len(live)} contexts")
            for i, ids in zip(live, actions):
                ids = list(ids)[:max_new_tokens_per_turn]
                _extend(tokens[i], policy[i], turns[i], ids, 1, turn)
                action = action_text(tokenizer, ids)
                obs, done, verdict = safe_step(envs[i], action)
                invalid[i] += int(_is_invalid(envs[i], action, obs))
                if done:
                    verdicts[i] = verdict
                    continue
                obs_ids = _encode(tokenizer, observation_format.format(observation=obs))
                used = len(prompts[i]) + len(tokens[i])
                full = max_context_tokens is not None and (
                    used >= max_context_tokens
                    or used + len(obs_ids) + max_new_tokens_per_turn > max_context_tokens
                )
                if turn == max_turns - 1 or full:
                    verdicts[i] = envs[i].verdict_at_limit()
                    continue
                _extend(tokens[i], policy[i], turns[i], obs_ids, 0, turn)
    finally:
        for e in envs:
            e.close()
    out = _rollout(tokenizer, problems, group_size, prompts, tokens, policy, turns, verdicts)
    out.invalid_actions = torch.tensor(invalid, dtype=torch.float32)
    return out


def _is_invalid(env: Environment, action: str, observation: str) -> bool:
    try:
        return bool(env.is_invalid(action, observation))
    except Exception:  # noqa: BLE001 - a metric must never stop an episode
        return False


def _encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _extend(tokens: list[int], policy: list[int], turns: list[int], ids: list[int], who: int, turn: int):
    tokens += ids
    policy += [who] * len(ids)
    turns += [turn] * len(ids)


def _rollout(tokenizer, problems, group_size, prompts, tokens, policy, turns, verdicts) -> Rollout:
    pad, n = tokenizer.pad_token_id, len(prompts)
    P, T = max(map(len, prompts)), max(1, max(map(len, tokens)))
    prompt_ids = torch.full((n, P), pad, dtype=torch.long)  # [N, P] left-padded
    prompt_mask = torch.zeros((n, P), dtype=torch.long)
    completion_ids = torch.full((n, T), pad, dtype=torch.long)  # [N, T] right-padded
    completion_mask = torch.zeros((n, T), dtype=torch.long)
    policy_mask = torch.zeros((n, T), dtype=torch.long)
    turn_index = torch.full((n, T), -1, dtype=torch.long)
    for i in range(n):
        if prompts[i]:
            prompt_ids[i, P - len(prompts[i]) :] = torch.tensor(prompts[i])
            prompt_mask[i, P - len(prompts[i]) :] = 1
        k = len(tokens[i])
        if k:
            completion_ids[i, :k] = torch.tensor(tokens[i])
            completion_mask[i, :k] = 1
            policy_mask[i, :k] = torch.tensor(policy[i])
            turn_index[i, :k] = torch.tensor(turns[i])
    return Rollout(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        group=torch.arange(len(problems)).repeat_interleave(group_size),
        problems=list(problems),
        completions=[tokenizer.decode(t, skip_special_tokens=True) for t in tokens],
        pad_id=pad,
        eos_id=tokenizer.eos_token_id,
        rewards=torch.tensor([float(v.reward) for v in verdicts]),
        correct=torch.tensor([bool(v.correct) for v in verdicts]),
        feedback=[v.feedback for v in verdicts],
        policy_mask=policy_mask,
        turn_index=turn_index,
    )


@functools.cache
def line_end_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Token ids whose text contains a newline (an action is one line), decoded once per tokenizer."""
    special = set(tokenizer.all_special_ids)
    vocab = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    return frozenset(i for i, text in enumerate(vocab) if "\n" in text and i not in special)


def engine_generate(
    engine: RolloutEngine, model, tokenizer: PreTrainedTokenizerBase, sampling: Sampling
) -> Generate:
    """A ``generate`` callable backed by a ``RolloutEngine``: one engine call per turn over every context.

    The engine samples up to ``sampling.max_new_tokens`` tokens per context and stops a row at
    EOS; the action is then cut after its first EOS or newline token (an action is one line; the
    stop token is kept, as the policy chose it). Engines know one stop id, so a row that writes a
    newline keeps sampling to EOS or the budget and the rest is dropped: a per-turn budget of a
    few dozen tokens bounds that waste.
    """
    stops = {tokenizer.eos_token_id, *line_end_ids(tokenizer)}
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id

    def generate(contexts: list[list[int]], keys: list[int] | None = None) -> list[list[int]]:
        device = next(model.parameters()).device
        ids, mask = left_pad([torch.tensor(c, dtype=torch.long, device=device) for c in contexts], pad)
        keyed = {} if keys is None else {"keys": keys}
        out = engine.generate(
            model, ids, mask, 1, sampling, pad, eos, **keyed
        ).completion_ids  # [n, <= budget]
        return [_cut(row.tolist(), stops) for row in out]

    return generate


def _cut(ids: list[int], stops: set[int]) -> list[int]:
    for k, t in enumerate(ids):
        if t in stops:
            return ids[: k + 1]
    return ids


def expert_rollout(
    env: Environment,
    problems: list[Problem],
    tokenizer: PreTrainedTokenizerBase,
    end_ids: Sequence[int] | None = None,
    **kwargs,
) -> Rollout:
    """The expert's episodes (``Problem.solution``, one action per line) in the layout RL sees.

    The warm start's data: each action is encoded and closed with ``end_ids`` (default: EOS), the
    observations come from the environment, and ``policy_mask`` marks the expert's tokens, so
    supervised training on them (labels where ``policy_mask`` is 1) teaches exactly what the policy
    will be asked to produce. One episode per problem; ``kwargs`` go to ``run_episodes``.
    """
    end = [tokenizer.eos_token_id] if end_ids is None else list(end_ids)
    parts = []
    for problem in problems:
        actions = iter((problem.solution or "").splitlines())
        play = lambda contexts, a=actions: [_encode(tokenizer, next(a, "")) + end for _ in contexts]
        kwargs.setdefault("max_new_tokens_per_turn", 10**6)
        parts.append(run_episodes(env, [problem], 1, play, tokenizer, **kwargs))
    return concat_rollouts(parts)


def continue_episodes(
    env: Environment,
    problem: Problem,
    prefix: Sequence[int],
    prefix_policy: Sequence[int],
    n: int,
    generate: Generate,
    tokenizer: PreTrainedTokenizerBase,
    **kwargs,
) -> Rollout:
    """``n`` episodes of ``problem`` that replay the actions of an episode's ``prefix``, then play on.

    Monte-Carlo values of multi-turn episodes: the environment is deterministic, so replaying the
    prefix's actions (the runs where ``prefix_policy`` is 1) reproduces its tokens, and the episodes
    continue from there with ``generate``. A prefix that ends inside a turn is replayed up to that
    turn's start (the value of a turn is taken where the policy is about to act). ``kwargs`` go to
    ``run_episodes``.
    """
    m = list(prefix_policy)
    ends = [t for t in range(len(m)) if m[t] and (t + 1 == len(m) or not m[t + 1])]  # last token of actions
    starts = [t for t in range(len(m)) if m[t] and (t == 0 or not m[t - 1])]
    complete = [(s, e) for s, e in zip(starts, ends) if e + 1 < len(m)]  # answered by an observation
    actions = [list(prefix[s : e + 1]) for s, e in complete]
    calls = 0

    def replay(contexts: list[list[int]]) -> list[list[int]]:
        nonlocal calls
        calls += 1
        if calls <= len(actions):
            return [actions[calls - 1]] * len(contexts)
        return generate(contexts)

    return run_episodes(env, [problem], n, replay, tokenizer, **kwargs)
