"""RREDCoT: reward redistribution over the segments of a chain of thought.

Formulas, defaults and provenance: ``docs/methods.md`` (RREDCoT).

GRPO gives every token of a rollout the same advantage A_i. RREDCoT (RUDDER-style
return decomposition) splits the chain of thought into K reasoning segments and
hands the final reward out to the segments that *changed* the model's own
estimate of success, so that a correct rollout reinforces mostly the step that
made the answer likely, and a wrong one penalises mostly the step that made it
unlikely. Only summaries of the paper are public; every [proposed] choice below
is a constructor argument.

1. Segments [summary]: candidate boundaries after blank lines (``boundary_texts``)
   and before reasoning keywords (``keywords``), matched on token ids; when a row
   has more than K - 1 candidates, keep the K - 1 with the highest next-token
   entropy of the policy at the boundary (``entropy[:, b]``, the uncertainty about
   the first token of the new segment), so segments split where the model forks.
2. Values [proposed]: the model itself, without generation, estimates the value of
   the prefix that ends at boundary b_k as the probability of the reference answer
   after an answer cue,

       V(s_k) = pi(answer | x, o_{<b_k}, cue) = exp(sum_j log pi(answer_j | ...)),

   for b_0 = 0 (no reasoning yet) up to the last interior boundary, all in ONE
   batched no-grad ``scorer.continuation_logprobs`` call per step (each row's chain
   runs once for all its cuts when the model keeps a KV cache). The value after the
   last segment is the final reward: V(s_K) = r_i.
3. Segment rewards [summary]: r_k = V(s_k) - V(s_{k-1}), k = 1..K, which sum to
   r_i - V(s_0) (the return decomposition).
4. Token weights [proposed]:

       sigma_k = K * max(delta, sign(A_i) r_k) / sum_k' max(delta, sign(A_i) r_k'),
       delta = 0.01 * mean_k |r_k|,

   so the weights are positive and average 1 over a row's segments; every token of
   segment k gets A_{i,t} = A_i * sigma_k. delta is relative to the row's own scale,
   so the weights do not change when all of a row's values are scaled (a failed
   rollout whose answer probabilities are all ~1e-10 is weighted like one at ~0.1);
   a row whose r_k are all exactly 0 gets weight 1 on every segment. A row with A_i = 0 has no effect
   (weight 1) and is not scored at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..core.rollout import Rollout
from ..core.text_roles import ANSWER_CUE, REASONING_KEYWORDS, SEGMENT_BOUNDARIES
from ..scoring.scorer import Scorer
from .base import Credit, CreditAssigner
from .texts import TextSettings

DEFAULT_BOUNDARY_TEXTS = ["\n\n"]
DEFAULT_KEYWORDS = ["Therefore", "So", "Thus", "Next", "First", "Then", "Finally", "Wait"]


def match_starts(ids: Tensor, pattern: Tensor) -> Tensor:
    """Where ``pattern`` [m] starts in each row of ``ids`` [N, T]: bool [N, T]."""
    N, T = ids.shape
    out = torch.zeros(N, T, dtype=torch.bool, device=ids.device)
    m = len(pattern)
    if m == 0 or m > T:
        return out
    windows = ids.unfold(1, m, 1)  # [N, T - m + 1, m]
    out[:, : T - m + 1] = (windows == pattern.to(ids.device)).all(-1)
    return out


def candidate_boundaries(
    completion_ids: Tensor,
    content_lengths: Tensor,
    after_patterns: list[Tensor],
    before_patterns: list[list[Tensor]],
) -> Tensor:
    """Candidate segment starts: bool [N, T], True at b when a new segment may start at token b.

    ``after_patterns``: a boundary goes right after each match (blank lines).
    ``before_patterns``: per keyword, its token-id variants (e.g. with and without a
    leading space, longest first); a boundary goes before the match. When a longer
    variant already covers a keyword occurrence (same end), the shorter one is dropped,
    so " So" gives one boundary (before the space), not two.
    Only interior starts 0 < b < content_length count (content excludes a trailing EOS).
    """
    N, T = completion_ids.shape
    cand = torch.zeros(N, T + 1, dtype=torch.bool, device=completion_ids.device)  # [N, T + 1]
    for pat in after_patterns:
        m = len(pat)
        if m:
            cand[:, m:] |= match_starts(completion_ids, pat)[:, : T + 1 - m]  # a match ends by T
    for variants in before_patterns:
        ends = torch.zeros(N, T + 1, dtype=torch.bool, device=completion_ids.device)  # keyword ends covered
        for pat in variants:
            m = len(pat)
            if m == 0:
                continue
            starts = match_starts(completion_ids, pat)  # [N, T]
            match_end = torch.zeros_like(ends)
            match_end[:, m:] = starts[:, : T + 1 - m]  # match at s ends at s + m
            new = match_end & ~ends  # occurrences not already covered by a longer variant
            ends |= match_end
            cand[:, : T + 1 - m] |= new[:, m:]  # boundary at the match start
    cand = cand[:, :T]
    pos = torch.arange(T, device=completion_ids.device)
    return cand & (pos > 0) & (pos < content_lengths[:, None])


def turn_boundaries(policy_mask: Tensor, content_lengths: Tensor) -> Tensor:
    """Segment starts of episodes: bool [N, T], True where an action after the first starts.

    A segment is then one turn: the policy's action and the observation that answers it (the
    default for multi-turn rollouts; ``RREDCoTCredit(segment_turns=False)`` keeps text boundaries).
    """
    m = policy_mask.bool()  # [N, T]
    start = torch.zeros_like(m)
    start[:, 1:] = m[:, 1:] & ~m[:, :-1]
    pos = torch.arange(m.shape[1], device=m.device)
    return start & (pos < content_lengths[:, None])


def select_boundaries(candidates: Tensor, entropy: Tensor | None, num_segments: int) -> Tensor:
    """Keep at most ``num_segments - 1`` candidates per row, those with the highest entropy: bool [N, T].

    ``entropy`` [N, T]: next-token entropy at each position (the distribution that
    predicts token b); only needed when some row has too many candidates. Ties go to
    the earlier boundary.
    """
    k = max(num_segments - 1, 0)
    counts = candidates.sum(-1)  # [N]
    if k == 0:
        return torch.zeros_like(candidates)
    if entropy is None or bool((counts <= k).all()):
        return candidates
    T = candidates.shape[1]
    # a tiny position penalty makes ties prefer earlier boundaries deterministically
    score = entropy.float() - 1e-6 * torch.arange(T, device=entropy.device) / max(T, 1)
    score = score.masked_fill(~candidates, float("-inf"))  # [N, T]
    top = score.topk(min(k, T), dim=-1).indices  # [N, k]
    keep = torch.zeros_like(candidates)
    keep.scatter_(1, top, True)
    return keep & candidates


def redistribute(values: Tensor, seg_mask: Tensor, sign: Tensor, delta_frac: float) -> tuple[Tensor, Tensor]:
    """Segment rewards and weights from values.

    Args:
        values: [n, K + 1] V(s_0) .. V(s_K) of each row (V(s_K) = the final reward), padded.
        seg_mask: [n, K] True on a row's real segments (the first K_i).
        sign: [n] sign(A_i).
        delta_frac: delta = delta_frac * mean_k |r_k| of the row.

    Returns:
        rewards [n, K]: r_k = V(s_k) - V(s_{k-1}) (0 on padding);
        sigma [n, K]: K_i * max(delta, sign r_k) / sum_k' max(delta, sign r_k') (0 on padding).

    Scale-free: sigma is unchanged when a row's values are all multiplied by the same
    factor, however small (a failed rollout whose answer probabilities are ~1e-12 gets the
    same weights as one at ~1e-1). The row is divided by its own scale mean_k |r_k| before
    the max, so no absolute floor on delta flattens small rows; a row whose r_k are all
    exactly 0 has no preferred segment and gets weight 1 on each (the exact rule for the
    0 / 0 of the formula). Computed in float64.
    """
    mask = seg_mask.double()
    rewards = (values.double()[:, 1:] - values.double()[:, :-1]) * mask  # [n, K]
    n_seg = mask.sum(-1).clamp(min=1)  # [n]
    scale = rewards.abs().sum(-1) / n_seg  # [n] mean_k |r_k|
    flat = scale == 0  # [n] every r_k exactly 0
    u = (
        rewards / torch.where(flat, torch.ones_like(scale), scale)[:, None]
    )  # [n, K] r_k in units of the scale
    m = torch.clamp(sign.double()[:, None] * u, min=delta_frac) * mask  # max(delta, sign r_k) / scale
    m = torch.where(flat[:, None], mask, m)
    sigma = n_seg[:, None] * m / m.sum(-1, keepdim=True).clamp(min=torch.finfo(torch.float64).tiny)
    return rewards.to(values.dtype), sigma.to(values.dtype)


@dataclass
class Redistribution:
    """Everything one step of RREDCoT computes (returned by ``RREDCoTCredit.redistribute``)."""

    boundaries: Tensor  # [N, T] bool: a kept segment starts at token b
    segment_ids: Tensor  # [N, T] long: segment index k(t) of each token
    num_segments: Tensor  # [N] K_i
    active: Tensor  # [N] bool: rows that were scored (A_i != 0 and a non-empty answer)
    values: Tensor  # [N, Kmax + 1] V(s_0) .. V(s_K) (0 on padding and inactive rows)
    segment_rewards: Tensor  # [N, Kmax] r_k
    sigma: Tensor  # [N, Kmax] segment weights (1 on inactive rows' segments, 0 on padding)
    weights: Tensor  # [N, T] token weights sigma_{k(t)} (0 on padding)
    advantages: Tensor  # [N, T] A_i * weights
    model_value_last: Tensor  # [N] the last value estimated by the model (before the reward replaces it)


class RREDCoTCredit(TextSettings, CreditAssigner):
    """Reward redistribution over reasoning segments, valued by the model's own answer probability.

    Args:
        num_segments: target number of segments K per rollout (at most K - 1 boundaries) [proposed].
        boundary_texts: texts after which a segment may end (blank lines) [summary].
        keywords: reasoning keywords before which a segment may start [summary]; each is
            matched with and without a leading space.
        answer_cue: text between the partial chain and the reference answer in the value
            query [proposed: " The answer is "].
            ``boundary_texts``, ``keywords`` and ``answer_cue`` left None come from the task's
            ``segment_boundaries``, ``reasoning_keywords`` and ``answer_cue`` for its
            plain layout, else the defaults above (``credit/texts.py``); boundary texts and keywords
            the vocabulary cannot spell are skipped, an unspellable cue is an error.
        delta_frac: delta = delta_frac * mean_k |r_k| in the weight formula [proposed]; relative to
            the row's own scale, so weights do not depend on the magnitude of its values.
        last_value_is_reward: V after the last segment is the final reward [proposed]; when
            False, the model's value of the whole chain is used instead (one more query per row).
        segment_turns: on multi-turn rollouts (``rollout.turn_index`` set) segments are turns
            (each action with the observation answering it); False uses the text boundaries there too.
        scale_by_std: GRPO (True) or Dr. GRPO (False) group advantages.
    """

    uses_policy_pass = True  # boundary entropies

    def __init__(
        self,
        num_segments: int = 4,
        boundary_texts: list[str] | None = None,
        keywords: list[str] | None = None,
        answer_cue: str | None = None,
        delta_frac: float = 0.01,
        last_value_is_reward: bool = True,
        segment_turns: bool = True,
        scale_by_std: bool = True,
    ) -> None:
        super().__init__(scale_by_std=scale_by_std)
        if num_segments < 1:
            raise ValueError("num_segments must be >= 1")
        self.num_segments = num_segments
        self.boundary_texts = boundary_texts
        self.keywords = keywords
        self.answer_cue = answer_cue
        self.delta_frac = delta_frac
        self.last_value_is_reward = last_value_is_reward
        self.segment_turns = segment_turns

    text_roles = {
        "boundary_texts": (SEGMENT_BOUNDARIES,),
        "keywords": (REASONING_KEYWORDS,),
        "answer_cue": (ANSWER_CUE,),
    }
    text_defaults = {
        "boundary_texts": DEFAULT_BOUNDARY_TEXTS,
        "keywords": DEFAULT_KEYWORDS,
        "answer_cue": " The answer is ",
    }

    def literal_texts(self, texts: dict) -> dict[str, list[str]]:
        return {"answer_cue": [texts["answer_cue"]] if texts["answer_cue"] else []}

    # ------------------------------------------------------------------ segmentation
    def _patterns(self, scorer: Scorer) -> tuple[list[Tensor], list[list[Tensor]]]:
        texts = self.texts(scorer)
        unk = getattr(scorer.tokenizer, "unk_token_id", None)

        def ok(ids: Tensor) -> bool:  # a pattern the vocabulary cannot spell would match every <unk>
            return len(ids) > 0 and (unk is None or unk not in ids.tolist())

        after = [ids for ids in (scorer.encode(t) for t in texts["boundary_texts"]) if ok(ids)]
        before = []
        for kw in texts["keywords"]:
            variants = {
                tuple(ids.tolist()) for ids in (scorer.encode(" " + kw), scorer.encode(kw)) if ok(ids)
            }
            before.append(
                [torch.tensor(v, dtype=torch.long) for v in sorted(variants, key=len, reverse=True)]
            )
        return after, before

    @staticmethod
    def _content_lengths(rollout: Rollout) -> Tensor:
        """Completion length without a trailing EOS: [N]."""
        lengths = rollout.lengths  # [N]
        last = rollout.completion_ids.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]  # [N]
        return lengths - ((last == rollout.eos_id) & (lengths > 0)).long()

    def segment(self, rollout: Rollout, scorer: Scorer) -> Tensor:
        """Kept segment starts: bool [N, T] (at most ``num_segments - 1`` per row)."""
        if self.segment_turns and getattr(rollout, "turn_index", None) is not None:
            cand = turn_boundaries(rollout.loss_mask, self._content_lengths(rollout))
        else:
            after, before = self._patterns(scorer)
            cand = candidate_boundaries(rollout.completion_ids, self._content_lengths(rollout), after, before)
        need_entropy = bool((cand.sum(-1) > self.num_segments - 1).any())
        entropy = scorer.policy().entropy if need_entropy else None  # [N, T]
        return select_boundaries(cand, entropy, self.num_segments)

    # ------------------------------------------------------------------ values and weights
    @torch.no_grad()
    def redistribute(self, rollout: Rollout, scorer: Scorer) -> Redistribution:
        """Segments, values, segment rewards and token weights for the rollout."""
        N, T = rollout.completion_ids.shape
        device = rollout.completion_ids.device
        adv = self.group_advantages(rollout)  # [N]
        bounds = self.segment(rollout, scorer)  # [N, T]
        seg_ids = bounds.long().cumsum(-1)  # [N, T] k(t)
        n_seg = bounds.sum(-1) + 1  # [N]
        Kmax = int(n_seg.max()) if N else 1
        content = self._content_lengths(rollout)  # [N]

        cue = scorer.encode(self.texts(scorer)["answer_cue"])
        answers = [scorer.encode(p.answer) for p in rollout.problems]
        group = rollout.group.tolist()
        active = (adv != 0) & torch.tensor([len(answers[g]) > 0 for g in group], device=device)

        # one query per (active row, boundary): prompt + completion[:b] + cue + answer, i.e. the
        # row's chain [prompt; completion] cut after b completion tokens, then cue + answer
        chains, items, n_targets, owners = [], [], [], []
        starts = [[0, *torch.nonzero(bounds[i]).flatten().tolist()] for i in range(N)]
        queries = {g: torch.cat([cue, answers[g]]) for g in set(group)}  # cue + answer, once per problem
        for i in torch.nonzero(active).flatten().tolist():
            prompt, comp, g = rollout.prompt_tokens(i), rollout.completion_ids[i], group[i]
            ends = starts[i] if self.last_value_is_reward else [*starts[i], int(content[i])]
            chains.append(torch.cat([prompt, comp[: max(ends)]]))
            for b in ends:
                items.append((len(chains) - 1, len(prompt) + b, queries[g]))
                n_targets.append(len(answers[g]))
                owners.append(i)
        values = torch.zeros(N, Kmax + 1, device=device)  # [N, Kmax + 1]
        model_last = torch.zeros(N, device=device)  # [N]
        if items:
            # batched, no grad; each chain runs once for all its cuts where the model allows
            logps = scorer.continuation_logprobs(chains, items, n_targets)
            v = torch.nn.utils.rnn.pad_sequence(logps).float().sum(0).exp().to(device)  # [n_queries]
            pos = 0
            for i in sorted(set(owners)):
                K = int(n_seg[i])
                n = K if self.last_value_is_reward else K + 1
                values[i, :n] = v[pos : pos + n]
                model_last[i] = v[pos + n - 1]
                pos += n
            if self.last_value_is_reward:
                rows = torch.nonzero(active).flatten()
                values[rows, n_seg[rows]] = rollout.rewards[rows].float().to(device)

        seg_mask = torch.arange(Kmax, device=device)[None, :] < n_seg[:, None]  # [N, Kmax]
        seg_rewards, sigma = redistribute(
            values, seg_mask & active[:, None], torch.sign(adv).float(), self.delta_frac
        )
        sigma = torch.where(active[:, None], sigma, seg_mask.float())  # inactive rows: weight 1
        mask = rollout.completion_mask.float()  # [N, T]
        weights = sigma.gather(1, seg_ids.clamp(max=Kmax - 1)) * mask  # [N, T]
        return Redistribution(
            boundaries=bounds,
            segment_ids=seg_ids,
            num_segments=n_seg,
            active=active,
            values=values,
            segment_rewards=seg_rewards,
            sigma=sigma,
            weights=weights,
            advantages=adv[:, None] * weights,
            model_value_last=model_last,
        )

    def assign(self, rollout: Rollout, scorer: Scorer) -> Credit:
        tokens_before = scorer.forward_tokens
        red = self.redistribute(rollout, scorer)
        active = red.active
        mask = rollout.completion_mask.bool()
        n_seg = red.num_segments.float()  # [N] kept segments a row (at most num_segments)
        metrics: dict[str, float] = {
            "segments_mean": float(n_seg.mean()),
            "multi_segment_frac": float((n_seg > 1).float().mean()),  # rows RREDCoT can weight unevenly
            "segments_max": float(n_seg.max()) if n_seg.numel() else 0.0,
            "active_frac": float(active.float().mean()),
            "extra_forward_tokens": float(scorer.forward_tokens - tokens_before),
        }
        w = red.weights[mask & active[:, None]]  # token weights of scored rows
        if w.numel():
            q = torch.quantile(w.float(), torch.tensor([0.1, 0.5, 0.9], device=w.device))
            metrics.update(
                weight_mean=float(w.mean()),
                weight_p10=float(q[0]),
                weight_p50=float(q[1]),
                weight_p90=float(q[2]),
                weight_max=float(w.max()),
                value_first=float(red.values[active, 0].mean()),
                value_last=float(red.model_value_last[active].mean()),
            )
            # where the largest weight lands: index of the top segment / (K_i - 1), rows with K_i > 1
            multi = active & (red.num_segments > 1)
            if bool(multi.any()):
                top = red.sigma[multi].argmax(-1).float()
                metrics["top_segment_pos"] = float((top / (red.num_segments[multi] - 1).float()).mean())
        else:
            metrics["weight_mean"] = 1.0
        return Credit(advantages=red.advantages, metrics=metrics)
