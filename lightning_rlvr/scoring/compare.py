"""A rollout's completions scored under other contexts (teacher or hindsight prompts): ``Scorer.compare``.

Layer: scoring (imports only ``core`` and the scoring modules below it). ``CompareViews`` is the part of
``Scorer`` (``scoring/scorer.py``) that runs ``compare``; it reads the scorer's policy pass and forward
helpers (``_student``, ``_chunks``, ``_idle_forward``, ...), so a ``TeacherScorer`` (``scoring/teacher.py``)
that swaps the student side runs the same code. Each distinct context runs once per micro-batch from its KV
cache when the model keeps one on a single rank (``scoring/prefix_scoring.py``), else whole sequences run,
the reference the fast path is tested against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..core.tensors import left_pad
from .logprobs import DivergenceFn, TopK
from .mode import _scoring
from .packing import causal_lm_forward, token_chunks
from .prefix_scoring import suffix_logits


class CompareViews:
    """``compare`` for ``Scorer``, which inherits it (a mixin: it uses the scorer's attributes, helpers)."""

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
