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

The cache entry is written whole or not at all (``core/files.atomic_dir``) and holds a
``manifest.json``, written last, with every file's size and SHA-256: an entry whose manifest is
missing or disagrees with a file (torn, truncated, corrupted, a file gone) is never loaded; one
line says so and the warm start trains again.

Reproducibility. The stopping point is a sampled accuracy on a few problems, so a float rounding
difference anywhere in training flips samples and moves it. Within one machine the result is a
pure function of the key (measured on the agent quickstart: 130 steps, accuracy 0.3125 and
bit-identical weights with 1 and with 2 threads, pool generated in other processes under other hash
seeds). Thread count is a known source of rounding differences on bigger CPUs (how reductions are
split), so the warm start trains with ``threads`` torch threads (1 by default; None for the run's own,
faster for real models on many cores), part of the key. What can still differ between machines (CPU
instruction set, GPU, torch version) is recorded with the result: the line each run prints,
``summary.json`` and the run's logged hyperparameters (``warm_start/*``: key, steps, accuracy, where
it was trained), so two runs that started from different warm starts show it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM

from .collect import Sampler, roll_out, worked_example
from .core import stop
from .core.files import atomic_dir, write_text
from .core.paths import cache_root
from .core.progress import Progress, say
from .engines.base import RolloutEngine, Sampling
from .engines.hf import HFGenerateEngine
from .models.policies import PolicySource
from .tasks.base import Task

log = logging.getLogger(__name__)
EVAL_OFFSET = 10**9  # warm-start evaluation reads the training stream far from where RL starts


def _public_fields(obj) -> dict:
    return {"class": type(obj).__name__, **{k: v for k, v in vars(obj).items() if not k.startswith("_")}}


MANIFEST = "manifest.json"
DEFAULT_BUDGET = 48  # the checks' budget when neither the warm start nor the run sets one


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """``manifest.json``: size and SHA-256 of every other file in ``folder`` (written last)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    entries = {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    write_text(folder / MANIFEST, json.dumps({"files": entries}, indent=1))


def manifest_problem(folder: Path) -> str | None:
    """What is wrong with a cache entry (None when every file its manifest names is intact)."""
    try:
        entries = json.loads((folder / MANIFEST).read_text())["files"]
    except FileNotFoundError:
        return "it has no manifest (an interrupted write, or one made before manifests)"
    except (ValueError, KeyError, TypeError) as err:
        return f"its manifest is unreadable ({type(err).__name__})"
    for name, want in entries.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != want["bytes"]:
            return f"{name} has {path.stat().st_size} bytes, the manifest says {want['bytes']}"
        if _sha256(path) != want["sha256"]:
            return f"{name} does not match its checksum"
    return None


def machine() -> dict:
    """What the same seed and code can still differ by between machines (recorded with a warm start)."""
    info = {"torch": str(torch.__version__), "threads": torch.get_num_threads()}
    with contextlib.suppress(Exception):  # older torch builds lack it
        info["cpu"] = torch.backends.cpu.get_cpu_capability()
    if torch.cuda.is_available():
        info["cuda"] = torch.cuda.get_device_name()
    return info


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` intra-op torch threads (None: as they are), then restore them."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class WarmStart:
    """Supervised fine-tuning on worked solutions until sampled accuracy reaches a band.

    Args:
        min_accuracy: stop once sampled accuracy is at least this; None: no accuracy stop, train
            ``max_steps`` steps (a fixed-length warm start, for a pool too varied to fit in a few
            hundred steps, where the checks only report).
        max_steps: give up (with a warning, unless ``min_accuracy`` is None) after this many steps.
        lr: AdamW learning rate.
        batch_size: sequences per step.
        eval_every: steps between accuracy checks.
        eval_prompts: problems sampled once each per check.
        max_new_tokens: completion budget when checking; None = the run's own (``model.max_new_tokens``),
            so the checks sample what RL will. Part of the cache key (resolved).
        seed: data order and sampling seed.
        cache: reuse / store the result under the cache directory.
        threads: torch threads while training (reductions split by thread count, and the stopping
            point with them); None = the run's own. Part of the cache key.
    """

    def __init__(
        self,
        min_accuracy: float | None = 0.2,
        max_steps: int = 2000,
        lr: float = 1e-3,
        batch_size: int = 64,
        eval_every: int = 25,
        eval_prompts: int = 128,
        max_new_tokens: int | None = None,
        seed: int = 0,
        cache: bool = True,
        threads: int | None = 1,
    ) -> None:
        self.min_accuracy = min_accuracy
        self.max_steps = max_steps
        self.lr = lr
        self.batch_size = batch_size
        self.eval_every = eval_every
        self.eval_prompts = eval_prompts
        self.max_new_tokens = max_new_tokens
        self._run_budget = DEFAULT_BUDGET  # the run's max_new_tokens, set by ``run``
        self.seed = seed
        self.cache = cache
        self.threads = threads

    def key(
        self,
        policy: PolicySource,
        task: Task,
        engine: RolloutEngine | None = None,
        render: Callable[[str], str] | None = None,
    ) -> str:
        """Hash of everything that determines the result. The defaults (HF engine, prompts as they
        are) add nothing, so caches made before engines and prompt formats existed stay valid."""
        mine = {**_public_fields(self), "max_new_tokens": self.budget}  # resolved: None means the run's
        parts = [policy.cache_key(), _public_fields(task), mine]
        if engine is not None and type(engine) is not HFGenerateEngine:  # other engines sample differently
            parts.append(_public_fields(engine))
        if render is not None:  # the formatted text of a fixed probe prompt identifies the format
            parts.append({"prompt_format": render("{probe}")})
        blob = json.dumps(parts, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def budget(self) -> int:
        """The checks' completion budget: ``max_new_tokens``, else the run's."""
        return self.max_new_tokens if self.max_new_tokens is not None else self._run_budget

    def run(
        self,
        model,
        tokenizer,
        policy: PolicySource,
        task: Task,
        engine: RolloutEngine | None = None,
        render: Callable[[str], str] | None = None,
        max_new_tokens: int | None = None,
    ) -> dict:
        """Warm-start ``model`` in place (from cache when possible); returns a summary dict.

        ``engine`` samples the accuracy checks (default ``HFGenerateEngine``); ``render`` formats each
        prompt for both training and checks, as the module's rollouts will (default: as is);
        ``max_new_tokens`` is the run's completion budget (the checks' unless set here).
        """
        self._run_budget = max_new_tokens if max_new_tokens is not None else DEFAULT_BUDGET
        engine = engine or HFGenerateEngine()
        key = self.key(policy, task, engine, render)
        rank0 = not dist.is_initialized() or dist.get_rank() == 0
        path = cache_root() / "warmstart" / key
        if self.cache and path.exists():
            summary = self._load(path, model, engine)
            if summary is not None:
                if rank0:
                    say(f"warm start {key}: loaded from {path} ({_describe(summary)})")
                return {**summary, "key": key, "cached": True}
        started = time.perf_counter()
        with torch.random.fork_rng(devices=[]), torch_threads(self.threads), stop.during("the warm start"):
            torch.manual_seed(self.seed)
            summary = {**self._train(model, tokenizer, task, engine, render), "machine": machine()}
        summary["seconds"] = round(time.perf_counter() - started, 1)
        if rank0:
            say(f"warm start {key}: {_describe(summary)}, {summary['seconds']:.0f} s")
        # Every rank trained the same weights; only rank 0 writes (transformers' save_pretrained
        # skips the weights on other ranks). The entry appears whole, its manifest written last.
        if self.cache and rank0:
            with atomic_dir(path) as tmp:
                model.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
                write_text(tmp / "summary.json", json.dumps(summary))
                write_manifest(tmp)
        return {**summary, "key": key, "cached": False}

    def _load(self, path: Path, model, engine: RolloutEngine) -> dict | None:
        """The cached result into ``model`` and its summary; None (after one line) when it is damaged."""
        problem = manifest_problem(path)
        if problem is None:
            try:
                cached = AutoModelForCausalLM.from_pretrained(path)
                model.load_state_dict(cached.state_dict())
                engine.sync_weights(model)  # engines that hold a copy of the weights must see these
                return json.loads((path / "summary.json").read_text())
            except Exception as err:  # noqa: BLE001 - a damaged cache is rebuilt, never fatal
                problem = f"it does not load ({type(err).__name__}: {err})"
        say(f"warm-start cache {path} is damaged: {problem}; training it again")
        shutil.rmtree(path, ignore_errors=True)
        return None

    def accuracy(
        self,
        model,
        tokenizer,
        task: Task,
        engine: RolloutEngine | None = None,
        render: Callable[[str], str] | None = None,
    ) -> float:
        """Sampled accuracy (one sample at temperature 1 per probe problem), rolled out as RL will.

        ``collect.roll_out`` samples and verifies it: one completion of at most ``budget`` tokens, or
        one episode of an environment (scored by the game, ``budget`` tokens per action).
        """
        problems = [task.train_problem(EVAL_OFFSET + i) for i in range(self.eval_prompts)]
        sampling = Sampling(self.budget)
        sampler = Sampler(engine or HFGenerateEngine(), model, tokenizer, sampling, render)
        rollout = roll_out(task, sampler, problems, 1).rollout  # verified (or scored by the game)
        return float(rollout.correct.float().mean())

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
                example = worked_example(task, task.train_problem(index), tokenizer, render)
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
        loud = not dist.is_initialized() or dist.get_rank() == 0
        with Progress(self.max_steps, "warm start", "steps", enabled=loud, estimate=False) as progress:
            acc, step, memo = self.accuracy(model, tokenizer, task, engine, render), 0, {}
            progress.set_postfix(acc=f"{acc:.2f}")
            target = math.inf if self.min_accuracy is None else self.min_accuracy
            while acc < target and step < self.max_steps:
                stop.check("in a supervised step")  # a stop signal ends the run here; nothing is cached
                batch = self._batch(tokenizer, task, step, render, memo)
                input_ids, mask, labels = (t.to(device) for t in batch)
                loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
                loss.backward()
                opt.step()
                engine.sync_weights(model)  # as after every RL update: the checks must sample these weights
                opt.zero_grad(set_to_none=True)
                step += 1
                if step % self.eval_every == 0:
                    acc = self.accuracy(model, tokenizer, task, engine, render)
                    progress.set_postfix(loss=f"{loss.item():.3f}", acc=f"{acc:.2f}")
                progress.update()
        if acc < target < math.inf:
            say(f"WARNING: warm start stopped at max_steps={self.max_steps} with accuracy {acc:.3f}")
        return {"steps": step, "accuracy": acc}


def _describe(summary: dict) -> str:
    """``130 steps to sampled accuracy 0.312 (cpu avx2, 1 thread, torch 2.13)``."""
    where = summary.get("machine", {})
    device = where.get("cuda") or f"cpu {where.get('cpu', '?')}".rstrip()
    threads = where.get("threads")
    trained = f"{device}, {threads} thread{'s' if threads != 1 else ''}, torch {where.get('torch', '?')}"
    return f"{summary['steps']} steps to sampled accuracy {summary['accuracy']:.3f} (trained on {trained})"
