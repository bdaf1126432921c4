"""No-grad views of the rollout-time policy: the only door a credit assigner has to the model.

A ``Scorer`` is made once per step, after sampling and before the update, so
everything it returns comes from the weights that generated the rollout.

* ``policy()`` -- one pass over the rollout as sampled: per-token log-probs,
  entropies and (on request) last-layer hidden states. Cached: if the update
  needs old log-probs, it reuses this pass instead of running its own.
* ``compare(contexts, rows, fn)`` -- the *same completion tokens* of
  ``rows`` scored under another context (a teacher or hindsight prompt), and
  ``fn(teacher_logp, student_logp)`` reduced per token over the full vocabulary;
  with ``teacher_top_k=k`` it also returns the teacher's k most likely tokens
  per position plus the mass of the rest (``TopK``), so a method that keeps
  the teacher for its loss stores [N, T, k] instead of [N, T, V]
  (about 30 GB at V = 150k, T = 1,024, N = 48).
* ``sequence_logprobs(sequences, n_targets)`` -- log-probs of the last tokens
  of arbitrary sequences (e.g. a reference answer after a partial chain);
  ``continuation_logprobs`` the same for sequences given as a shared prefix cut
  anywhere plus a suffix, each prefix run once.

``compare`` and ``continuation_logprobs`` run each distinct prefix (teacher
context, prompt, chain) once per micro-batch and only the suffixes after it,
from its KV cache (``scoring/prefix_scoring.py``), on a single rank with a
model that keeps one; ``compare`` then scores the student only on the rows it
views. Otherwise (several ranks, test doubles) they run whole sequences, the
reference the fast path is tested against.

The scorer never samples: a continuation ``sampler`` (``collect.continuations.EngineSampler``)
passed by the module rides along for the methods that sample (Monte-Carlo credit,
``credit/mc.py``), which count its tokens in ``generated_tokens``.

Position convention: the logit at position ``j`` predicts token ``j + 1``. In
a sequence ``[context (Lc tokens); completion]`` completion token ``t`` is
predicted at position ``Lc + t - 1``; every method relies on this, and
``tests/test_scoring.py`` pins it with a policy whose prediction is a known
function of its context.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.distributed import max_over_ranks, world_size
from ..core.rollout import Rollout
from ..core.tensors import left_pad
from .continuations import ContinuationSampler
from .packing import MicroBatch, causal_lm_forward, micro_batches, place, shares_prompts
from .packing import forward as packed_forward
from .prefix_scoring import suffix_logits, supports_prefix_cache

DivergenceFn = Callable[[Tensor, Tensor], Tensor]


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log softmax(logits)[target] without materialising the full log-softmax: [..., T]."""
    logits = logits.float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


@dataclass
class TopK:
    """A sparse next-token distribution: its k most likely tokens and the log of the remaining mass.

    Seen as a distribution over k + 1 buckets (the k tokens, then "everything else"), it is
    exact when k = V (the tail is empty: log 0 = -inf).
    """

    ids: Tensor  # [..., k] long, token ids in descending probability
    logp: Tensor  # [..., k] their log-probs
    tail: Tensor  # [...] log of 1 - sum(exp(logp)), computed without cancellation

    @staticmethod
    def of(logp: Tensor, k: int) -> TopK:
        """The top-k view of full log-probs [..., V]."""
        top, ids = logp.topk(min(k, logp.shape[-1]), dim=-1)
        rest = logp.scatter(-1, ids, float("-inf"))  # [..., V] the tokens outside the top k
        return TopK(ids=ids, logp=top, tail=torch.logsumexp(rest, dim=-1))

    def buckets(self) -> Tensor:
        """Log-probs over the k + 1 buckets: [..., k + 1]."""
        return torch.cat([self.logp, self.tail[..., None]], dim=-1)


def bucket_logprobs(logits: Tensor, ids: Tensor) -> Tensor:
    """Log-probs of ``softmax(logits)`` over the buckets of a ``TopK``'s ``ids``: [..., k + 1].

    The tokens ``ids`` [..., k], then the mass of every other token (a logsumexp over the
    vocabulary with ``ids`` masked out, so a tail near 0 keeps its precision). Gradients flow.
    """
    logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)  # [..., 1]
    top = logits.gather(-1, ids) - lse
    if ids.shape[-1] == logits.shape[-1]:  # k = V: the tail is empty (a constant, so no NaN gradient)
        return torch.cat([top, torch.full_like(lse, float("-inf"))], dim=-1)
    tail = torch.logsumexp(logits.scatter(-1, ids, float("-inf")), dim=-1, keepdim=True) - lse
    return torch.cat([top, tail], dim=-1)


def token_chunks(n: int, rows: int, tokens: int | None, widths: list[int] | None = None) -> list[Tensor]:
    """Consecutive index chunks of ``range(n)``: at most ``rows`` items and, when ``tokens`` and ``widths``
    are given, at most ``tokens`` padded tokens (items x the widest) each; never an empty chunk."""
    if tokens is None or widths is None:
        return list(torch.arange(n).split(rows))
    chunks, start, widest = [], 0, 0
    for i in range(n):
        w = max(widest, widths[i], 1)
        if i > start and ((i - start + 1) * w > tokens or i - start >= rows):
            chunks.append(torch.arange(start, i))
            start, w = i, max(widths[i], 1)
        widest = w
    if n:
        chunks.append(torch.arange(start, n))
    return chunks


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-position entropy of softmax(logits): [..., T]. A -inf logit (a masked token) adds 0 log 0 = 0."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).where(logp > float("-inf"), 0.0).sum(-1)


@contextlib.contextmanager
def scoring_mode(model):
    """No gradients and ``model`` in eval mode (no dropout), restored afterwards."""
    was_training = getattr(model, "training", False)  # test doubles need not be Modules
    if was_training:
        model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training:
            model.train()


def _scoring(method):
    """A ``Scorer`` method run in ``scoring_mode`` of its model."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with scoring_mode(self.model):
            return method(self, *args, **kwargs)

    return wrapper


def same_in_train_mode(model) -> bool:
    """Whether ``model`` computes the same function in train mode as in eval mode (no dropout).

    The scorer runs the policy in eval mode, the update in train mode; only when they agree
    can the update's forward stand in for the scorer's. Checks ``nn.Dropout`` modules and the
    config's dropout rates (Hugging Face attention passes ``attention_dropout`` to SDPA
    directly, with no module): any rate above 0 says no.
    """
    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()):
        return False
    config = getattr(model, "config", None)
    rates = [v for k, v in (vars(config) if config is not None else {}).items() if "drop" in k.lower()]
    return not any(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in rates)


@dataclass
class PolicyPass:
    """What one no-grad pass of the rollout-time policy over the rollout gives."""

    logp: Tensor  # [N, T] log-prob of each sampled token
    entropy: Tensor  # [N, T] entropy of the next-token distribution
    hidden: Tensor | None  # [N, T, H] fp32 last-layer hidden state that predicted each token


class Scorer:
    """No-grad scoring of a rollout by the policy that produced it (see the module docstring).

    Args:
        model: the policy (its weights must not change while the scorer is used).
        rollout: the sampled batch.
        tokenizer: the policy's tokenizer (``encode`` turns template text into context ids).
        micro_batch_size: rows (or views) per forward pass.
        micro_batch_tokens: padded tokens per forward of the policy pass (None: rows only);
            see ``lightning_rlvr/scoring/packing.py``.
        cache_bytes: full next-token distributions of the rollout are kept for
            ``compare`` when they fit in this many bytes, else recomputed per micro-batch.
        sampler: samples and verifies continuations of completion prefixes (for
            Monte-Carlo credit, which calls it; the scorer never does); None when the caller offers none.
        share_prompts: the policy pass runs each distinct prompt once per micro-batch when the model
            keeps a KV cache (``packing.shares_prompts``); the module passes its own switch.
        render: how a prompt's text became the rollout's prompt (the module's ``PromptFormat``); a
            method renders its privileged contexts through it (``lightning_rlvr/prompts.py``).
            None: the sampler's, else the plain layout (the prompt as is).
        task: the task the rollout came from (default: the sampler's); methods read the task's
            own texts for its plain layout from it (``credit/texts.py``).
    """

    def __init__(
        self,
        model,
        rollout: Rollout,
        tokenizer=None,
        micro_batch_size: int = 64,
        cache_bytes: int = 2**28,
        sampler: ContinuationSampler | None = None,
        micro_batch_tokens: int | None = None,
        share_prompts: bool = True,
        render: Callable[[str], str] | None = None,
        task=None,
    ) -> None:
        self.model = model
        self.render = render if render is not None else getattr(sampler, "render", None)
        self.task = task if task is not None else getattr(sampler, "task", None)
        self.share_prompts = share_prompts
        self.rollout = rollout
        self.tokenizer = tokenizer
        self.micro_batch_size = micro_batch_size
        self.micro_batch_tokens = micro_batch_tokens
        self.cache_bytes = cache_bytes
        self._pass: PolicyPass | None = None
        self._student_logp: Tensor | None = None  # [N, T, V] when it fits in cache_bytes
        self.sampler = sampler
        self.forward_tokens = 0  # tokens run through the model by this scorer (extra cost to log)
        self.generated_tokens = 0  # of which sampled by a method through ``sampler``

    def encode(self, text: str) -> Tensor:
        """Token ids of ``text`` (no special tokens) on the rollout's device: [L]."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return torch.tensor(ids, dtype=torch.long, device=self.rollout.completion_ids.device)

    # ------------------------------------------------------------------ policy pass
    @_scoring
    def policy(self, hidden: bool = False) -> PolicyPass:
        """Log-probs, entropies and optionally hidden states of the sampled tokens (one cached pass).

        Padding-free (``lightning_rlvr/scoring/packing.py``): length-sorted micro-batches, each cut to
        its own longest row, each distinct prompt run once when prefixes may be cached (as in
        the update); every output is 0 on completion padding.
        """
        if self._pass is not None and (self._pass.hidden is not None or not hidden):
            return self._pass
        r = self.rollout
        share = self._uses_prefix_cache(self.model) and shares_prompts(self.model, self.share_prompts)
        rows, sizes = torch.arange(r.num_rows), (self.micro_batch_size, self.micro_batch_tokens)
        batches = micro_batches(r, rows, *sizes, share=share)

        def run():
            for mb in batches:
                logits, states = packed_forward(self.model, r, mb, hidden=hidden)  # [m, T_m, V], [m, T_m, H]
                self.forward_tokens += int(r.prompt_mask[mb.rows].sum() + r.completion_mask[mb.rows].sum())
                yield mb, logits, states

        self._adopt(run(), hidden)
        return self._pass

    def adopt_policy_pass(self, parts: list[tuple[MicroBatch, Tensor, Tensor | None]]) -> PolicyPass:
        """Take the policy pass from forwards the caller ran itself (the update's, same weights).

        ``parts`` are ``(micro-batch, logits [m, T_m, V], hidden [m, T_m, H] or None)`` covering
        every row once, as ``packing.forward`` returns them; they are detached here. The caller
        vouches that its forward equals this scorer's (same weights, no dropout in train mode:
        ``same_in_train_mode``). Returns the pass ``policy`` will hand out from now on.
        """
        hidden = any(h is not None for _, _, h in parts)
        with torch.no_grad():
            self._adopt(((mb, lg.detach(), None if h is None else h.detach()) for mb, lg, h in parts), hidden)
        return self._pass

    def _adopt(self, parts, hidden: bool) -> None:
        """Place per-micro-batch outputs in the [N, T] layout: log-probs, entropies, hidden states,
        and the full distributions when they fit in ``cache_bytes`` (for ``compare``)."""
        r = self.rollout
        N, T = r.completion_ids.shape
        mask = r.completion_mask.bool()  # [N, T] completion padding reads 0
        logp = torch.zeros(N, T, device=r.completion_ids.device)
        ent = torch.zeros_like(logp)
        hids = dists = None
        for mb, logits, states in parts:
            logits = logits.float()  # [m, T_m, V]
            m_mask = mask[mb.rows, : mb.width]  # [m, T_m]
            place(logp, mb, token_logprobs(logits, r.completion_ids[mb.rows, : mb.width]).where(m_mask, 0.0))
            place(ent, mb, entropy_from_logits(logits).where(m_mask, 0.0))
            if hidden:
                if hids is None:
                    hids = logp.new_zeros(N, T, states.shape[-1])
                place(hids, mb, states.float().where(m_mask[..., None], 0.0))
            V = logits.shape[-1]
            if dists is None and N * T * V * 4 <= self.cache_bytes:
                dists = logp.new_zeros(N, T, V)
            if dists is not None:
                place(dists, mb, F.log_softmax(logits, dim=-1).where(m_mask[..., None], 0.0))
        if hidden and hids is None:  # no micro-batch had a row (an empty rollout on this rank)
            hids = logp.new_zeros(N, T, 0)
        self._pass = PolicyPass(logp=logp, entropy=ent, hidden=hids)
        if dists is not None:
            self._student_logp = dists

    @property
    def has_policy_pass(self) -> bool:
        return self._pass is not None

    @_scoring
    def policy_logprobs(self, rows: Tensor) -> Tensor:
        """Full next-token log-probs [m, T, V] of the completions of ``rows`` (e.g. for a ``token_loss``)."""
        return self._student(rows)

    def _student(self, rows: Tensor) -> Tensor:
        """Full next-token log-probs [m, T, V] of the rollout's own completions for ``rows``."""
        if self._student_logp is None and self._pass is None:
            self.policy()
        if self._student_logp is not None:
            return self._student_logp[rows]
        r = self.rollout
        P = r.prompt_ids.shape[1]
        out = causal_lm_forward(self.model, r.input_ids[rows], r.attention_mask[rows])
        self.forward_tokens += int(r.attention_mask[rows].sum())
        return F.log_softmax(out.logits[:, P - 1 : -1].float(), dim=-1)

    def _chunks(self, n: int, widths: list[int] | None = None) -> list[Tensor]:
        """Micro-batches of ``n`` items, padded with empty ones so every rank runs as many forwards.

        With ``widths`` (each item's padded length, items in order) and ``micro_batch_tokens`` set, a
        micro-batch also holds at most that many padded tokens (at least one item), so the [m, L, V]
        logits and the [m, S, V] distributions a view compares stay bounded by it, not by the views.
        """
        chunks = list(token_chunks(n, self.micro_batch_size, self.micro_batch_tokens, widths)) if n else []
        missing = max_over_ranks(len(chunks), self.rollout.completion_ids.device) - len(chunks)
        return chunks + [torch.arange(0)] * missing

    def _idle_forward(self) -> None:
        """A one-token forward: under FSDP a rank with nothing to score still joins the collectives."""
        ids = self.rollout.completion_ids[:1, :1]
        causal_lm_forward(self.model, ids, torch.ones_like(ids))

    def _prepare_student(self, has_views: bool) -> None:
        """Run the policy pass ``_student`` reads before any view is scored, on every rank alike.

        Under several ranks every rank runs it (its forwards are collectives), also one
        without views; alone, only when some view will read it.
        """
        if self._student_logp is None and self._pass is None and (has_views or world_size() > 1):
            self.policy()

    def _idle_student(self) -> None:
        """The student forward of a micro-batch, on a rank with nothing to score (uncached log-probs)."""
        if self._student_logp is None:
            self._idle_forward()

    # ------------------------------------------------------------------ shared prefixes
    prefix_cache: bool | None = None  # None: when the model keeps a KV cache and one rank runs

    def _uses_prefix_cache(self, model) -> bool:
        """Whether shared prefixes run once (``prefix_scoring.py``): a KV-cache model on a single rank.

        Under several ranks every rank must run the same forwards (FSDP collectives), which the
        whole-sequence path guarantees with its padded micro-batch counts.
        """
        if self.prefix_cache is not None:
            return self.prefix_cache and world_size() == 1
        return world_size() == 1 and supports_prefix_cache(model)

    def _fast_student(self) -> bool:
        """Whether ``compare`` scores the student itself, only the rows it needs, prompts shared: when the
        full distributions are not cached (no policy pass yet, or too large for ``cache_bytes``)."""
        return self._student_logp is None and self._uses_prefix_cache(self.model)

    def _student_prefix(self, rows: Tensor, ends: Tensor) -> Tensor:
        """Student log-probs [m, E, V] of completion tokens t < ends[j] of ``rows[j]`` (E = max end).

        Each distinct prompt runs once and identical (prompt, completion) rows once
        (``prefix_scoring.py``); nothing is cached for later calls.
        """
        r = self.rollout
        index: dict[tuple, int] = {}
        prompts: list[Tensor] = []
        items = []
        for i, e in zip(rows.tolist(), ends.tolist()):
            p = r.prompt_tokens(i)
            k = index.setdefault(tuple(p.tolist()), len(index))
            if k == len(prompts):
                prompts.append(p)
            items.append((k, len(p), r.completion_ids[i, :e]))
        logits, tokens = suffix_logits(self.model, prompts, items, r.pad_id)  # [m, E, V]
        self.forward_tokens += tokens
        return F.log_softmax(logits.float(), dim=-1)

    @_scoring
    def continuation_logprobs(
        self, prefixes: list[Tensor], items: list[tuple[int, int, Tensor]], n_targets: list[int]
    ) -> list[Tensor]:
        """``sequence_logprobs`` of the sequences ``prefixes[p][:k] + suffix`` for items ``(p, k, suffix)``.

        The log-probs of the last ``n_targets[i]`` tokens of each suffix (at most its length).
        Each prefix runs once per micro-batch however many items continue it, at any cut
        ``k >= 1`` (``prefix_scoring.py``); whole sequences through ``sequence_logprobs`` when
        the model keeps no KV cache or several ranks run.
        """
        if any(n > len(s) or k < 1 for (_, k, s), n in zip(items, n_targets)) or not self._uses_prefix_cache(
            self.model
        ):
            return self.sequence_logprobs([torch.cat([prefixes[p][:k], s]) for p, k, s in items], n_targets)
        results: list[Tensor] = []
        pad = self.rollout.pad_id
        for chunk in torch.arange(len(items)).split(self.micro_batch_size):
            part = [items[i] for i in chunk.tolist()]
            logits, tokens = suffix_logits(self.model, prefixes, part, pad)  # [m, S, V]
            self.forward_tokens += tokens
            # every item's suffix log-probs at once, then each item's last n_targets of them
            suffixes = torch.nn.utils.rnn.pad_sequence(
                [s for _, _, s in part], batch_first=True, padding_value=pad
            )
            logp = token_logprobs(logits[:, : suffixes.shape[1]], suffixes.to(logits.device))  # [m, S]
            for j, (_, _, s) in enumerate(part):
                n = n_targets[int(chunk[j])]
                results.append(logp[j, len(s) - n : len(s)])
        return results

    # ------------------------------------------------------------------ other contexts
    @_scoring
    def compare(
        self,
        contexts: list[Tensor],
        rows: list[int],
        fn: DivergenceFn,
        spans: list[tuple[int, int]] | None = None,
        teacher_top_k: int | None = None,
    ) -> Tensor | tuple[Tensor, TopK]:
        """Score completion tokens of ``rows`` under other ``contexts`` and reduce per token.

        View ``v`` runs the policy on ``[contexts[v]; completion[rows[v], :end]]`` and
        compares, at each completion position ``t`` in ``spans[v] = (start, end)``
        (default: the whole completion), the teacher distribution with the student's
        (the same token under the rollout's own prompt): ``fn(teacher_logp, student_logp)``,
        both [m, S, V] log-probs, returning [m, S] (or [m, S, K]).

        Returns [N, T] (or [N, T, K]): values written at each view's positions, 0 elsewhere.
        When several views cover the same position the last one wins. With ``teacher_top_k=k``
        returns ``(values, TopK)`` with the teacher's top-k log-probs [N, T, k] and tail [N, T]
        at the same positions (zeros elsewhere); ``fn`` still sees the full distributions,
        one micro-batch at a time, so nothing [N, T, V] is held.
        """
        r = self.rollout
        T = r.completion_ids.shape[1]
        lengths = r.lengths.tolist()
        spans = spans or [(0, lengths[row]) for row in rows]
        out: Tensor | None = None
        top: TopK | None = None  # [N, T, k] when teacher_top_k is set
        fast = bool(rows) and self._uses_prefix_cache(self.model) and all(len(c) for c in contexts)
        fast_student = fast and self._fast_student()
        if fast:  # each distinct context runs once per micro-batch (prefix_scoring.py)
            ctx_index: dict[tuple, int] = {}
            ctx_of = [ctx_index.setdefault(tuple(c.tolist()), len(ctx_index)) for c in contexts]
            first = {k: v for v, k in reversed(list(enumerate(ctx_of)))}  # context -> its first view
            distinct_ctx = [contexts[first[k]] for k in range(len(ctx_index))]
            # views sharing a context stay together (it runs once per micro-batch); contexts and ends
            # of similar length share micro-batches, so little of each is padding
            order = sorted(range(len(rows)), key=lambda v: (len(contexts[v]), ctx_of[v], spans[v][1]))
            widths = [spans[v][1] for v in order]  # only the suffixes run (and give logits)
            chunks = list(token_chunks(len(rows), self.micro_batch_size, self.micro_batch_tokens, widths))
        else:
            self._prepare_student(bool(rows))
            order = sorted(range(len(rows)), key=lambda v: len(contexts[v]) + spans[v][1])  # [ctx; o_<end]
            chunks = self._chunks(len(rows), [len(contexts[v]) + spans[v][1] for v in order])
        writes: list[tuple[int, Tensor, TopK | None]] = []  # (view, values [S_v, ...], top-k), any order
        for chunk in chunks:
            if not len(chunk):
                self._idle_forward()  # the teacher's forward ...
                self._idle_student()  # ... and the student's, as ranks with views run them
                continue
            views = [order[c] for c in chunk.tolist()]
            device = r.completion_ids.device
            S = max(spans[v][1] - spans[v][0] for v in views)
            t_idx = torch.zeros(len(views), S, dtype=torch.long, device=device)  # [m, S] completion positions
            for j, v in enumerate(views):
                start, end = spans[v]
                t_idx[j, : end - start] = torch.arange(start, end, device=device)
            view_rows = torch.tensor([rows[v] for v in views], device=device)
            ends = torch.tensor([spans[v][1] for v in views], device=device)
            if fast:
                items = [
                    (ctx_of[v], len(contexts[v]), r.completion_ids[rows[v], : spans[v][1]]) for v in views
                ]
                logits, tokens = suffix_logits(self.model, distinct_ctx, items, r.pad_id)  # [m, E, V]
                cols = t_idx.clamp(max=max(logits.shape[1] - 1, 0))  # row t predicts completion token t
            else:
                seqs = [torch.cat([contexts[v], r.completion_ids[rows[v], : spans[v][1]]]) for v in views]
                ids, mask = left_pad(seqs, r.pad_id)
                L = ids.shape[1]
                logits = causal_lm_forward(self.model, ids, mask).logits  # [m, L, V]
                tokens = int(mask.sum())
                cols = (L - ends[:, None] + t_idx - 1).clamp(
                    min=0
                )  # [m, S] column of token t: L - end + t - 1
            self.forward_tokens += tokens
            teacher = F.log_softmax(
                logits.float().gather(1, cols[..., None].expand(-1, -1, logits.shape[-1])), dim=-1
            )  # [m, S, V]
            if fast_student:
                student_all = self._student_prefix(view_rows, ends)  # [m, E, V]
                t_at = t_idx.clamp(max=max(student_all.shape[1] - 1, 0))
            else:
                student_all, t_at = self._student(view_rows), t_idx  # [m, T, V]
            student = student_all.gather(1, t_at[..., None].expand(-1, -1, student_all.shape[-1]))
            values = fn(teacher, student)  # [m, S] or [m, S, K]
            if out is None:
                out = torch.zeros((r.num_rows, T, *values.shape[2:]), device=values.device)
            sparse = TopK.of(teacher, teacher_top_k) if teacher_top_k is not None else None  # [m, S, k]
            if sparse is not None and top is None:
                k, dev = sparse.ids.shape[-1], sparse.ids.device
                top = TopK(
                    ids=torch.zeros(r.num_rows, T, k, dtype=torch.long, device=dev),
                    logp=torch.zeros(r.num_rows, T, k, device=dev),
                    tail=torch.zeros(r.num_rows, T, device=dev),
                )
            for j, v in enumerate(views):
                n = spans[v][1] - spans[v][0]
                part = None
                if sparse is not None:
                    part = TopK(sparse.ids[j, :n], sparse.logp[j, :n], sparse.tail[j, :n])
                writes.append((v, values[j, :n], part))
        for v, vals, part in sorted(writes, key=lambda w: w[0]):  # in view order: the last view wins
            start, end = spans[v]
            out[rows[v], start:end] = vals
            if part is not None:
                top.ids[rows[v], start:end], top.logp[rows[v], start:end] = part.ids, part.logp
                top.tail[rows[v], start:end] = part.tail
        if out is None:
            out = torch.zeros((r.num_rows, T), device=r.completion_ids.device)
        if teacher_top_k is None:
            return out
        if top is None:  # no view on this rank
            empty = torch.zeros(r.num_rows, T, 0, device=out.device)
            top = TopK(ids=empty.long(), logp=empty, tail=torch.zeros(r.num_rows, T, device=out.device))
        return out, top

    @_scoring
    def sequence_logprobs(self, sequences: list[Tensor], n_targets: list[int]) -> list[Tensor]:
        """Log-probs of the last ``n_targets[i]`` tokens of each sequence, given what precedes them."""
        results: list[Tensor] = []
        for chunk in self._chunks(len(sequences)):
            if not len(chunk):
                self._idle_forward()
                continue
            ids, mask = left_pad([sequences[i] for i in chunk.tolist()], self.rollout.pad_id)
            logits = causal_lm_forward(self.model, ids, mask).logits  # [m, L, V]
            self.forward_tokens += int(mask.sum())
            logp = token_logprobs(logits[:, :-1], ids[:, 1:])  # [m, L-1] log p(ids[j+1] | ids[:j+1])
            for j, i in enumerate(chunk.tolist()):
                n = n_targets[i]
                results.append(logp[j, logp.shape[1] - n :] if n else logp[j, :0])
        return results


class TeacherScorer(Scorer):
    """``compare`` under another, frozen model (an external teacher) against the policy's own distributions.

    The teacher sees the same rollout and contexts; the ``student_logp`` handed to ``fn`` still comes
    from ``policy`` (the rollout-time policy, in eval mode and without gradient), so methods such as
    OPD run the same code as their self-teacher variants. Tokens the teacher runs are added to
    ``policy.forward_tokens`` (the step's extra forward cost). Vocabularies must match.
    """

    def __init__(self, teacher, policy: Scorer) -> None:
        r = policy
        super().__init__(
            teacher,
            r.rollout,
            r.tokenizer,
            r.micro_batch_size,
            r.cache_bytes,
            micro_batch_tokens=r.micro_batch_tokens,
            render=r.render,
            task=r.task,
        )
        self.policy_scorer = policy

    def _student(self, rows: Tensor) -> Tensor:
        return _scoring(Scorer._student)(self.policy_scorer, rows)  # the policy in eval mode, no grad

    def _prepare_student(self, has_views: bool) -> None:
        _scoring(Scorer._prepare_student)(self.policy_scorer, has_views)

    def _idle_student(self) -> None:
        _scoring(Scorer._idle_student)(self.policy_scorer)

    def _fast_student(self) -> bool:
        return self.policy_scorer._fast_student()

    def _student_prefix(self, rows: Tensor, ends: Tensor) -> Tensor:
        return _scoring(Scorer._student_prefix)(self.policy_scorer, rows, ends)

    def compare(self, *args, **kwargs) -> Tensor:
        before = self.forward_tokens
        out = super().compare(*args, **kwargs)
        self.policy_scorer.forward_tokens += self.forward_tokens - before
        return out
