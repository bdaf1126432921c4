"""Read-only views of the policy for credit methods: log-probs, teacher passes, hidden states.

Layer: imports only ``core``. ``scorer`` holds ``Scorer`` (the policy as the methods see it) and
``TeacherScorer``; ``packing`` and ``prefix_scoring`` make its forward passes cheap.
"""

from __future__ import annotations

from .scorer import Scorer, TeacherScorer

__all__ = ["Scorer", "TeacherScorer"]
