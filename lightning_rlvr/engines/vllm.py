"""``VLLMEngine``: colocated vLLM on the training GPU.

vLLM runs in the training process, on the same GPU, with sleep mode: between
rollouts it releases its memory (``sleep``) so the update has the GPU, and takes
it back (``wake_up``) to sample. The policy's weights are pushed into vLLM's
model before the first rollout after an update (``sync_weights`` only marks them
stale, so several optimiser steps in one RL step cost one push). With LoRA, only
the adapters move: they are saved as a ``peft`` adapter and handed to vLLM as a
new ``LoRARequest`` (vLLM keeps the base weights it loaded at the start). Under
FSDP each rank gathers the full weights (``full_tensor``) and drives its own
colocated vLLM.

vLLM is imported only when the engine first samples, so configs that name it
parse (and the rest of the project runs) without vLLM installed; it needs CUDA.
The engine asks vLLM for the log-prob of each sampled token (``logprobs=0``) and
returns it as ``Generation.logp``: vLLM's numerics differ from the trainer's, which
is what ``Rollout.engine_logp`` exists to correct.

Not run on the CPU machine this project is developed on; ``benchmarks/gpu_check.sh``
exercises it (a short GRPO fit and a throughput comparison) on any GPU machine.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import torch
from torch import Tensor

from ..core import stop
from ..core.errors import RLVRError
from .base import Generation, RolloutEngine, Sampling


def _full_state_dict(model) -> dict[str, Tensor]:
    """Every parameter and buffer as a plain tensor (FSDP2 shards gathered; a collective on every rank)."""
    out = {}
    for name, value in model.state_dict().items():
        value = value.full_tensor() if hasattr(value, "full_tensor") else value
        out[name] = value.detach()
    return out


class VLLMEngine(RolloutEngine):
    """Colocated vLLM with sleep/wake, weights (or LoRA adapters) pushed after each update.

    Args:
        gpu_memory_utilization: fraction of GPU memory vLLM may use (weights + KV cache).
        sleep: release vLLM's GPU memory between rollouts (``LLM.sleep(level=1)``).
        max_model_len: longest context + completion (default: the model's ``max_position_embeddings``).
        dtype: vLLM's dtype (``auto`` = the checkpoint's).
        enforce_eager: skip CUDA graph capture (faster start, slower decode).
        max_lora_rank: largest LoRA rank vLLM reserves room for.
        seed: vLLM's sampling seed.
    """

    def __init__(
        self,
        gpu_memory_utilization: float = 0.3,
        sleep: bool = True,
        max_model_len: int | None = None,
        dtype: str = "auto",
        enforce_eager: bool = False,
        max_lora_rank: int = 64,
        seed: int = 0,
    ) -> None:
        self.gpu_memory_utilization = gpu_memory_utilization
        self.sleep = sleep
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.enforce_eager = enforce_eager
        self.max_lora_rank = max_lora_rank
        self.seed = seed
        self._llm = None
        self._stale = False
        self._lora = None  # the current LoRARequest, when the policy has adapters
        self._lora_mode = False  # whether the running vLLM was started for a LoRA policy
        self._version = 0
        self._dir: str | None = None

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model) -> None:
        self._stale = True  # pushed before the next rollout (one push per RL step, however many updates)

    @staticmethod
    def _is_lora(model) -> bool:
        return hasattr(model, "peft_config")

    def _start(self, model) -> None:
        if not torch.cuda.is_available():
            raise RLVRError(
                "VLLMEngine needs a CUDA GPU; on CPU use lightning_rlvr.engines.fast.FastEngine "
                "or lightning_rlvr.engines.hf.HFGenerateEngine"
            )
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: weights can be pushed
        try:
            from vllm import LLM
        except ImportError as err:
            raise RLVRError(
                f"VLLMEngine needs vllm ({err}); `pip install vllm` or use HFGenerateEngine"
            ) from err
        base = model.get_base_model() if self._is_lora(model) else model
        self._dir = tempfile.mkdtemp(prefix="rlvr_vllm_")
        base_dir = os.path.join(self._dir, "base")
        if self._is_lora(model):  # vLLM loads the bare base weights; adapters come as LoRA requests
            state = {k.replace("base_model.model.", "", 1): v for k, v in _full_state_dict(model).items()}
            state = {k.replace(".base_layer", ""): v for k, v in state.items() if "lora_" not in k}
        else:
            state = _full_state_dict(base)
        base.save_pretrained(base_dir, state_dict=state)
        self._llm = LLM(
            model=base_dir,
            skip_tokenizer_init=True,  # token ids in, token ids out
            gpu_memory_utilization=self.gpu_memory_utilization,
            enable_sleep_mode=self.sleep,
            max_model_len=self.max_model_len or base.config.max_position_embeddings,
            dtype=self.dtype,
            enforce_eager=self.enforce_eager,
            enable_lora=self._is_lora(model),
            max_lora_rank=self.max_lora_rank,
            seed=self.seed,
        )
        self._lora_mode = self._is_lora(model)
        self._stale = self._lora_mode  # the adapters still have to be handed over

    def _stop(self) -> None:
        import gc

        self._llm, self._lora = None, None
        gc.collect()
        torch.cuda.empty_cache()

    def _inner_model(self):
        """vLLM's own ``nn.Module`` (its location moved between vLLM versions)."""
        executor = self._llm.llm_engine.model_executor
        worker = executor.driver_worker
        worker = getattr(worker, "worker", worker)
        return worker.model_runner.model

    def _push(self, model) -> None:
        self._version += 1
        if self._is_lora(model):
            from vllm.lora.request import LoRARequest

            path = os.path.join(self._dir, f"adapter_{self._version}")
            model.save_pretrained(path)  # peft writes only the adapters
            self._lora = LoRARequest(f"policy_{self._version}", self._version, path)
        else:
            self._inner_model().load_weights(_full_state_dict(model).items())
            self._llm.reset_prefix_cache()  # cached prefixes were computed with the old weights
        self._stale = False

    # ------------------------------------------------------------------ sampling
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
        if keys is not None:
            raise RLVRError(
                "VLLMEngine samples from vLLM's own stream, not keyed by row; "
                "set model.sampling_key: stream, or use the HF or fast engine for keyed sampling"
            )
        if self._llm is not None and self._is_lora(model) != self._lora_mode:
            self._stop()  # e.g. the warm start sampled the bare model, RL samples it with adapters
        if self._llm is None:
            self._start(model)  # checks for CUDA and vllm first: one clear error without them
        elif self.sleep:
            self._llm.wake_up()
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if self._stale:
            self._push(model)
        params = SamplingParams(
            n=n,
            temperature=sampling.temperature if sampling.do_sample else 0.0,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,
            max_tokens=sampling.max_new_tokens,
            stop_token_ids=[eos_id],
            ignore_eos=False,
            logprobs=0,  # the sampled token's log-prob
            detokenize=False,
        )
        prompts = [
            TokensPrompt(prompt_token_ids=row[m.bool()].tolist()) for row, m in zip(context_ids, context_mask)
        ]
        stop.check("while generating tokens")  # one call on the GPU: the stop is checked before it
        outputs = self._llm.generate(prompts, params, lora_request=self._lora, use_tqdm=False)
        if self.sleep:
            self._llm.sleep(level=1)
        seqs = [c for out in outputs for c in out.outputs]  # B * n, grouped by context
        T = max(1, max(len(c.token_ids) for c in seqs))
        ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
        logp = torch.zeros(len(seqs), T)
        for i, c in enumerate(seqs):
            ids[i, : len(c.token_ids)] = torch.tensor(c.token_ids, dtype=torch.long)
            for t, (token, entry) in enumerate(zip(c.token_ids, c.logprobs or [])):
                logp[i, t] = entry[token].logprob
        device = context_ids.device
        return Generation(completion_ids=ids.to(device), logp=logp.to(device))

    def __del__(self) -> None:
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
