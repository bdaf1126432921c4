"""``HFGenerateEngine``: one batched Hugging Face ``generate`` call with KV cache (the default).

This is the behaviour the project always had, and it samples exactly what it
sampled before under the same seed: the contexts are repeated ``n`` times and
passed to ``generate`` with the same arguments. Under FSDP every rank must run
the same number of forwards (each is a collective), so ``synced_gpus`` is set
whenever more than one rank is running; that is this engine's business, not the
module's. It reads the live policy, so ``sync_weights`` has nothing to do, and it
reports no log-probs of its own (``generate`` does not keep them by default).

Keyed sampling (``keys``): ``generate`` runs greedy behind a logits processor (``KeyedDraw``) that
does the sampling itself, in ``FastEngine``'s order (temperature, top-k, top-p, softmax, then
``argmax(p / E)``) with E from each row's own stream, and leaves only the drawn token finite.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from ..core import stop
from ..core.distributed import world_size
from ..core.rng import RowStreams
from ..core.tensors import completion_mask_from_ids
from .base import Generation, RolloutEngine, Sampling
from .sampling import process_logits


class KeyedDraw(LogitsProcessor):
    """Samples each row's next token with its own stream; the scores become -inf but for that token."""

    def __init__(self, streams: RowStreams, sampling: Sampling) -> None:
        self.streams, self.sampling = streams, sampling
        self.rows = list(range(len(streams)))

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        probs = process_logits(scores.float(), self.sampling).softmax(-1)  # [N, V]
        token = (probs / self.streams.exponential(self.rows, probs.shape[-1])).argmax(-1)
        return torch.full_like(scores, float("-inf")).scatter_(-1, token[:, None], 0.0)


class StopCheck(StoppingCriteria):
    """A safe point after every generated token: a stop signal ends the run there (``core/stop.py``)."""

    def __call__(self, input_ids: Tensor, scores: Tensor, **kwargs) -> Tensor:
        stop.check("while generating tokens")
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class HFGenerateEngine(RolloutEngine):
    """Hugging Face ``generate`` on the live policy (works for any causal LM, LoRA and FSDP included)."""

    supports_keys = True

    @torch.no_grad()
    def generate(
        self,
        model,
        context_ids: Tensor,
        context_mask: Tensor,
        n: int,
        sampling: Sampling,
        pad_id: int,
        eos_id: int,
        keys: list[int] | None = None,
    ) -> Generation:
        stop.check("while generating tokens")  # and after every token (StopCheck)
        ids = context_ids.repeat_interleave(n, 0)  # [N, P]
        mask = context_mask.repeat_interleave(n, 0)  # [N, P]
        was_training = model.training
        model.eval()
        sample = sampling.do_sample
        extra = {}
        if keys is not None and sample:  # keyed: the processor samples, generate takes its only token
            extra["logits_processor"] = LogitsProcessorList(
                [KeyedDraw(RowStreams(keys, ids.device), sampling)]
            )
            sample = False
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=sample,
            temperature=sampling.temperature if sample else None,
            top_p=sampling.top_p if sample else None,
            top_k=sampling.top_k if sample else None,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=eos_id,
            pad_token_id=pad_id,
            use_cache=True,
            synced_gpus=world_size() > 1,  # every rank keeps stepping until all are done (FSDP)
            stopping_criteria=StoppingCriteriaList([StopCheck()]),
            **extra,
        )
        model.train(was_training)
        completion = out[:, ids.shape[1] :]  # [N, T]
        keep = completion_mask_from_ids(completion, eos_id)
        return Generation(completion_ids=completion.masked_fill(keep == 0, pad_id))
