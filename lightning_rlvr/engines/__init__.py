"""Rollout engines, chosen by ``class_path`` (``model.engine``); see ``base.py`` for the seam.

* ``hf.HFGenerateEngine`` -- Hugging Face ``generate`` (any model, LoRA, FSDP).
* ``fast.FastEngine`` -- a lean decode loop for small Llama-style models on CPU.
* ``vllm.VLLMEngine`` -- colocated vLLM on a GPU.

With no ``model.engine`` a run takes ``FastEngine`` where it samples as ``generate`` does, else
``HFGenerateEngine`` (``choose.py``). Only the base classes are imported here; each engine module
is imported when chosen.
"""

from .base import Generation, RolloutEngine, Sampling

__all__ = ["Generation", "RolloutEngine", "Sampling"]
