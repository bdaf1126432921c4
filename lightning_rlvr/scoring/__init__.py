"""Read-only views of the policy for credit methods: log-probs, teacher passes, hidden states.

Layer: imports only ``core``. ``scorer`` holds ``Scorer`` (the policy as the methods see it), ``teacher``
``TeacherScorer``, ``compare`` its ``compare``, ``logprobs`` the log-prob maths and ``mode``
scoring mode; ``packing`` and ``prefix_scoring`` make its forward passes cheap.
"""

from __future__ import annotations

from .scorer import Scorer
from .teacher import TeacherScorer

__all__ = ["Scorer", "TeacherScorer"]
