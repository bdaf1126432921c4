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

Layer: scoring (imports only ``core``). Around the ``Scorer`` here: the log-prob maths
(``logprobs.py``), scoring mode (``mode.py``), ``compare`` (``compare.py``) and
``TeacherScorer`` (``teacher.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core import stop
from ..core.distributed import max_over_ranks, world_size
from ..core.rollout import Rollout
from ..core.tensors import left_pad
from .compare import CompareViews
from .continuation_sampler import ContinuationSampler
from .logprobs import entropy_from_logits, token_logprobs
from .mode import _scoring
from .packing import MicroBatch, causal_lm_forward, micro_batches, place, shares_prompts, token_chunks
from .packing import forward as packed_forward
from .prefix_scoring import suffix_logits, supports_prefix_cache

SCORING = "in a scoring pass"  # where a stop signal finds the run (core/stop.py)


@dataclass
class PolicyPass:
    """What one no-grad pass of the rollout-time policy over the rollout gives."""

    logp: Tensor  # [N, T] log-prob of each sampled token
    entropy: Tensor  # [N, T] entropy of the next-token distribution
    hidden: Tensor | None  # [N, T, H] fp32 last-layer hidden state that predicted each token


class Scorer(CompareViews):
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
                stop.check(SCORING)  # a stop signal ends the run here (core/stop.py)
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
        ``train_mode_matches_eval``). Returns the pass ``policy`` will hand out from now on.
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
            stop.check(SCORING)
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

    @_scoring
    def sequence_logprobs(self, sequences: list[Tensor], n_targets: list[int]) -> list[Tensor]:
        """Log-probs of the last ``n_targets[i]`` tokens of each sequence, given what precedes them."""
        results: list[Tensor] = []
        for chunk in self._chunks(len(sequences)):
            stop.check(SCORING)
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
