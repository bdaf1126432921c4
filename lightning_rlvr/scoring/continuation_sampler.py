"""The continuation sampler as a credit method sees it: the protocol (``ContinuationSampler``) and its result.

Layer: ``scoring`` (imports nothing above ``core``). The sampler itself lives in
``collect.continuations`` (``EngineSampler``); a ``Scorer`` carries one to the methods that sample
(Monte-Carlo credit) and never calls it itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

from ..core.problem import Problem


@dataclass
class Continued:
    """Verified continuations of K prefixes, ``n`` each."""

    rewards: Tensor  # [K, n] verifier rewards of prefix + continuation
    correct: Tensor  # [K, n] bool, the verifier's ``Verdict.correct``
    generated_tokens: int  # new tokens sampled
    forward_tokens: int  # context (prefill) + new tokens run through the model


class ContinuationSampler(Protocol):
    def __call__(
        self, prompts: list[Tensor], prefixes: list[Tensor], problems: list[Problem], n: int, **kw
    ) -> Continued: ...
