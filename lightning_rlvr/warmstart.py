"""Supervised warm start on worked solutions, cached on disk.

RL from a policy at 0% accuracy sees only all-wrong groups and learns
nothing; at 100% it has nothing left to learn. The warm start trains on the
task's worked solutions and stops on a *measured* band: every ``eval_every``
steps it samples one completion for ``eval_prompts`` problems and stops once
the sampled accuracy reaches ``min_accuracy`` (a fixed step count lands
anywhere between 3% and 70% depending on the seed). It trains on, and checks
with, the prompts exactly as RL will show them (the module's ``prompt_format``),
and samples its checks through the module's rollout engine. The result is saved with
``save_pretrained`` under a key of everything that determines it, so a rerun
loads it in a second.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM

from lightning_rlvr.engines.base import RolloutEngine, Sampling
from lightning_rlvr.engines.hf import HFGenerateEngine
from lightning_rlvr.models import PolicySource
from lightning_rlvr.rollout import Sampler
from lightning_rlvr.tasks.base import Task, safe_check

log = logging.getLogger(__name__)
EVAL_OFFSET = 10**9  # warm-start evaluation reads the training stream far from where RL starts


def cache_root() -> Path:
    """``$LIGHTNING_RLVR_CACHE`` or ``~/.cache/lightning_rlvr``."""
    return Path(os.environ.get("LIGHTNING_RLVR_CACHE", Path.home() / ".cache" / "lightning_rlvr"))


def _public_fields(obj) -> dict:
    return {"class": type(obj).__name__, **{k: v for k, v in vars(obj).items() if not k.startswith("_")}}


class WarmStart:
    """Supervised fine-tuning on worked solutions until sampled accuracy reaches a band.

    Args:
        min_accuracy: stop once sampled accuracy is at least this.
        max_steps: give up (with a warning) after this many steps.
        lr: AdamW learning rate.
        batch_size: sequences per step.
        eval_every: steps between accuracy checks.
        eval_prompts: problems sampled once each per check.
        max_new_tokens: completion budget when checking.
        seed: data order and sampling seed.
        cache: reuse / store the result under the cache directory.
    """

    def __init__(
        self,
        min_accuracy: float = 0.2,
        max_steps: int = 2000,
        lr: float = 1e-3,
        batch_size: int = 64,
        eval_every: int = 25,
        eval_prompts: int = 128,
        max_new_tokens: int = 48,
        seed: int = 0,
        cache: bool = True,
    ) -> None:
        self.min_accuracy = min_accuracy
        self.max_steps = max_steps
        self.lr = lr
        self.batch_size = batch_size
        self.eval_every = eval_every
        self.eval_prompts = eval_prompts
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.cache = cache

    def key(
        self,
        policy: PolicySource,
        task: Task,
        engine: RolloutEngine | None = None,
        render: Callable[[str], str] | None = None,
    ) -> str:
        """Hash of everything that determines the result. The defaults (HF engine, prompts as they
        are) add nothing, so caches made before engines and prompt formats existed stay valid."""
        parts = [policy.cache_key(), _public_fields(task), _public_fields(self)]
        if engine is not None and type(engine) is not HFGenerateEngine:  # other engines sample differently
            parts.append(_public_fields(engine))
        if render is not None:  # the formatted text of a fixed probe prompt identifies the format
            parts.append({"prompt_format": render("{probe}")})
        blob = json.dumps(parts, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def run(
        self,
        model,
        tokenizer,
        policy: PolicySource,
        task: Task,
        engine: RolloutEngine | None = None,
        render: Callable[[str], str] | None = None,
    ) -> dict:
        """Warm-start ``model`` in place (from cache when possible); returns a summary dict.

        ``engine`` samples the accuracy checks (default ``HFGenerateEngine``); ``render`` formats each
        prompt for both training and checks, as the module's rollouts will (default: as is).
        """
        engine = engine or HFGenerateEngine()
        path = cache_root() / "warmstart" / self.key(policy, task, engine, render)
        if self.cache and (path / "summary.json").is_file():
            try:
                cached = AutoModelForCausalLM.from_pretrained(path)
                model.load_state_dict(cached.state_dict())
                engine.sync_weights(model)  # engines that hold a copy of the weights must see these
                summary = json.loads((path / "summary.json").read_text())
                log.info("warm start loaded from %s (accuracy %.3f)", path, summary["accuracy"])
                return {**summary, "cached": True}
            except Exception as err:  # noqa: BLE001 - a damaged cache is rebuilt, never fatal
                log.warning("warm-start cache %s is unreadable (%s); training it again", path, err)
                shutil.rmtree(path, ignore_errors=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            summary = self._train(model, tokenizer, task, engine, render)
        # Every rank trained the same weights; only rank 0 writes (transformers' save_pretrained
        # skips the weights on other ranks). Write aside, then rename: nobody sees half a cache.
        if self.cache and (not dist.is_initialized() or dist.get_rank() == 0):
            tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / "summary.json").write_text(json.dumps(summary))
            try:
                os.rename(tmp, path)
            except OSError:  # another process finished first with the same result
                shutil.rmtree(tmp, ignore_errors=True)
        return {**summary, "cached": False}

    def accuracy(
        self,
        model,
        tokenizer,
        task: Task,
        engine: RolloutEngine | None = None,
        render: Callable[[str], str] | None = None,
    ) -> float:
        """Sampled accuracy (one sample at temperature 1 per probe problem), rolled out as RL will.

        ``Task.rollout`` samples it: one completion, verified here, or one episode of an
        environment (scored by the game, ``max_new_tokens`` per action).
        """
        problems = [task.train_problem(EVAL_OFFSET + i) for i in range(self.eval_prompts)]
        sampling = Sampling(self.max_new_tokens)
        sampler = Sampler(engine or HFGenerateEngine(), model, tokenizer, sampling, render)
        rollout = task.rollout(sampler, problems, 1)
        if rollout.correct is not None:  # scored by the task itself (episodes)
            return float(rollout.correct.float().mean())
        correct = [safe_check(task, c, p)[0].correct for c, p in zip(rollout.completions, problems)]
        return sum(correct) / len(correct)

    def _batch(
        self, tokenizer, task: Task, step: int, render: Callable[[str], str] | None = None, memo=None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``batch_size`` worked examples (``Task.worked_example``), right-padded: ids, mask, labels.

        ``memo`` keeps the examples of a finite training split (an environment replays its expert
        episode to build one, so each is built once per warm start).
        """
        n = task.size("train")
        ids, labels = [], []
        for i in range(self.batch_size):
            index = step * self.batch_size + i
            key = None if n is None or memo is None else index % n
            if key is None or key not in memo:
                example = task.worked_example(task.train_problem(index), tokenizer, render)
                if key is not None:
                    memo[key] = example
            x, y = example if key is None else memo[key]
            ids.append(x)
            labels.append(y)
        length = max(map(len, ids))
        input_ids = torch.full((len(ids), length), tokenizer.pad_token_id)
        label_t = torch.full((len(ids), length), -100)
        mask = torch.zeros((len(ids), length), dtype=torch.long)
        for i, (x, y) in enumerate(zip(ids, labels)):  # right padding: positions start at 0
            input_ids[i, : len(x)] = torch.tensor(x)
            label_t[i, : len(y)] = torch.tensor(y)
            mask[i, : len(x)] = 1
        return input_ids, mask, label_t

    def _train(self, model, tokenizer, task: Task, engine: RolloutEngine, render) -> dict:
        device = next(model.parameters()).device
        opt = torch.optim.AdamW(model.parameters(), lr=self.lr)
        model.train()
        acc, step, memo = self.accuracy(model, tokenizer, task, engine, render), 0, {}
        bar = tqdm(total=self.max_steps, desc="warm start", leave=False, dynamic_ncols=True)
        while acc < self.min_accuracy and step < self.max_steps:
            input_ids, mask, labels = (t.to(device) for t in self._batch(tokenizer, task, step, render, memo))
            loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            opt.step()
            engine.sync_weights(model)  # as after every RL update: the checks must sample these weights
            opt.zero_grad(set_to_none=True)
            step += 1
            bar.update(1)
            if step % self.eval_every == 0:
                acc = self.accuracy(model, tokenizer, task, engine, render)
                bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{acc:.2f}")
        bar.close()
        if acc < self.min_accuracy:
            log.warning("warm start stopped at max_steps=%d with accuracy %.3f", self.max_steps, acc)
        log.info("warm start: %d steps, sampled accuracy %.3f", step, acc)
        return {"steps": step, "accuracy": acc}
