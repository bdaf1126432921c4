"""Shared pieces of the benchmark scripts: machine description, modules from the YAMLs, timing, tables.

The machine these benchmarks run on is small (2 CPU cores) and often shared,
so every figure is recorded with the load average at the time, methods are
timed in interleaved rounds (slow drift of the machine hits all of them
alike), and medians are reported. Each script prints its table and writes it
to ``benchmarks/results/<name>.md`` together with the command that made it.
"""

from __future__ import annotations

import math
import os
import platform
import shlex
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
QUICKSTART = "configs/quickstart.yaml"
METHOD_DIR = REPO / "configs" / "method"
# Display names and a fixed order; methods whose YAML is missing are skipped, unknown YAMLs appended.
METHOD_NAMES = {
    "grpo": "GRPO",
    "dr_grpo": "Dr. GRPO",
    "dapo": "DAPO",
    "shear": "SHEAR",
    "sc_grpo": "SC-GRPO",
    "hsd": "HSD",
    "hp_rlvr": "HP-RLVR",
    "rredcot": "RREDCoT",
}


# ---------------------------------------------------------------------- machine
def load_average() -> str:
    """The 1/5/15-minute load averages, as ``uptime`` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "lightning", "trl"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - a missing optional package is reported, not fatal
            out[name] = "not installed"
    return out


def machine_lines() -> list[str]:
    """Markdown bullet lines describing the machine and software, with the load average now."""
    import torch

    v = versions()
    return [
        f"- CPU: {cpu_model()}, {os.cpu_count()} logical cores, torch threads {torch.get_num_threads()}",
        "- software: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- load average (1/5/15 min) at the end: {load_average()} "
        "(the machine is shared with other engineers' jobs during these runs)",
    ]


def add_common_args(parser) -> None:
    """``--threads`` and ``--out``, shared by every script."""
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: on this shared 2-core machine 2 threads ran up to 10x "
        "slower than 1 whenever the other core was busy)",
    )
    parser.add_argument("--out", type=Path, default=None, help="results folder (default benchmarks/results)")


def add_policy_config_arg(parser) -> None:
    """``--policy-config FILE``: the run config a benchmark builds its policy and task from."""
    parser.add_argument(
        "--policy-config",
        default=None,
        metavar="FILE",
        help="run config to take the policy, LoRA, task and prompt format from instead of "
        f"{QUICKSTART} (e.g. configs/quickstart_real.yaml: SmolLM2-135M-Instruct + LoRA); its batch, "
        "group size and token budget are used unless given here",
    )


def tiny_batch_defaults(args) -> None:
    """Without ``--policy-config`` the tiny quickstart's figures keep their historical batch (16 x 8, 48)."""
    if args.policy_config is None:
        args.batch_size, args.group_size = args.batch_size or 16, args.group_size or 8
        args.max_new_tokens = args.max_new_tokens or 48


def policy_source(args) -> str:
    """What the benchmark's policy is, for its table."""
    tiny = "the quickstart's warm-started policy"
    return f"`{args.policy_config}`'s policy" if args.policy_config else tiny


def batch_overrides(args) -> list[str]:
    """The dotted overrides for the batch flags the user gave (None: the config's own value)."""
    flags = {
        "batch_size": "--data.batch_size",
        "group_size": "--model.group_size",
        "max_new_tokens": "--model.max_new_tokens",
    }
    given = {flag: getattr(args, k) for k, flag in flags.items() if getattr(args, k) is not None}
    return [x for flag, value in given.items() for x in (flag, str(value))]


def adopt_batch(args, cli) -> None:
    """Fill the batch flags left unset from the built run (what the config says)."""
    module = cli.model
    args.batch_size = args.batch_size or cli.datamodule.batch_size
    args.group_size = args.group_size or module.group_size
    args.max_new_tokens = args.max_new_tokens or module.max_new_tokens


def ready_policy(module):
    """The module's policy as a fit trains it: LoRA applied, the warm start (if any) from the cache."""
    module.configure_model()
    if module.warm_start is not None and module.warm_start_summary is None:
        module.warm_start_summary = module.warm_start.run(
            module.model, module.tokenizer, module.policy_source, module.task
        )
    return module


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


# ---------------------------------------------------------------------- memory
def reset_peak_rss() -> bool:
    """Reset this process's RSS high-water mark (Linux ``/proc/self/clear_refs``); False if unsupported."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """RSS high-water mark since the last reset (``VmHWM``), falling back to ``getrusage``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------------- methods and modules
def available_methods(selected: list[str] | None = None) -> list[str]:
    """Method keys (YAML stems) present in ``configs/method``, GRPO first, in a fixed order."""
    present = {p.stem for p in METHOD_DIR.glob("*.yaml")}
    order = [m for m in METHOD_NAMES if m in present] + sorted(present - set(METHOD_NAMES))
    if selected:
        unknown = [m for m in selected if m not in present]
        if unknown:
            raise SystemExit(f"unknown method(s) {unknown}; present: {sorted(present)}")
        order = [m for m in order if m in selected]
    return order


def display(method: str) -> str:
    return METHOD_NAMES.get(method, method)


def build_cli(
    method: str,
    extra_configs: list[str] | None = None,
    overrides: list[str] | None = None,
    workdir: str = "/tmp/lrlvr_bench",
    base: str | None = None,
):
    """``RLVRCLI(run=False)`` on ``base`` (default the quickstart) + the method's YAML (+ ``extra_configs``),
    set up for timing.

    No logger, no validation, no checkpoints, no progress bar; the warm start is
    loaded from the on-disk cache at the first ``fit``. ``overrides`` (dotted flags)
    come last. Returns the CLI (``.model``, ``.datamodule``, ``.trainer``).
    """
    from lightning_rlvr.cli import RLVRCLI
    from lightning_rlvr.data import RLVRDataModule
    from lightning_rlvr.module import RLVRModule

    warnings.filterwarnings("ignore")
    args = [
        "--config",
        base or QUICKSTART,
        "--config",
        f"configs/method/{method}.yaml",
        *(x for c in extra_configs or [] for x in ("--config", c)),
        "--model.validate_at_start",
        "false",
        "--trainer.logger",
        "false",
        "--trainer.limit_val_batches",
        "0",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--checkpoint.dirpath",
        f"{workdir}/{method}",
        "--checkpoint.save_last",
        "false",
        "--checkpoint.every_n_train_steps",
        "0",
        *(overrides or []),
    ]
    return RLVRCLI(
        RLVRModule,
        RLVRDataModule,
        seed_everything_default=0,
        run=False,
        args=args,
        auto_configure_optimizers=False,
        save_config_callback=None,
    )


class StepRecorder(Callback):
    """Per training step: wall time, the module's logged split (``time/*``, ``perf/*``) and peak RSS.

    With a ``flops.FlopMeter`` on the module, each record also holds the step's
    generation and update FLOPs (``gen_flops``, ``update_flops``) and token counts.

    Wall time runs from ``on_train_batch_start`` to ``on_train_batch_end`` (the
    module's whole ``training_step`` plus Lightning's logging around it; the
    batch of prompts is fetched before). The RSS high-water mark is reset at the
    start of each step, so ``peak_rss_mb`` is the highest RSS during that step.
    """

    KEYS = (
        "time/rollout_s",
        "time/score_s",
        "time/credit_s",
        "time/update_s",
        "perf/tokens_per_s",
        "perf/fused_policy_pass",
        "train/completion_len",
    )

    def __init__(self, meter=None) -> None:
        self.meter = meter  # flops.FlopMeter or None
        self.steps: list[dict[str, float]] = []
        self._t = 0.0
        self._rss0 = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.meter is not None:
            self.meter.take()  # drop anything counted outside a step
        reset_peak_rss()
        self._rss0 = rss_mb()
        self._t = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        wall = time.perf_counter() - self._t
        row = {k: float(trainer.callback_metrics[k]) for k in self.KEYS if k in trainer.callback_metrics}
        row.update(step_s=wall, peak_rss_mb=peak_rss_mb(), rss_before_mb=self._rss0)
        if self.meter is not None:
            row.update(self.meter.take())
        self.steps.append(row)


def fit_steps(cli, recorder, steps: int) -> list[dict[str, float]]:
    """Run ``steps`` more training steps of an already built CLI; returns their records."""
    trainer = cli.trainer
    if recorder not in trainer.callbacks:
        trainer.callbacks.append(recorder)
    start = len(recorder.steps)
    trainer.fit_loop.epoch_loop.max_steps = trainer.global_step + steps
    trainer.fit(cli.model, datamodule=cli.datamodule)
    return recorder.steps[start:]


# ---------------------------------------------------------------------- timing and statistics
def interleave(
    runners: dict[str, Callable[[], Any]], rounds: int, log: Callable[[str], None] = print
) -> dict[str, list[Any]]:
    """Call every runner once per round, rotating the order each round; returns each runner's results."""
    names = list(runners)
    out: dict[str, list[Any]] = {n: [] for n in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            out[name].append(runners[name]())
        log(f"round {r + 1}/{rounds} done (load {load_average()})")
    return out


def median(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def growth_exponent(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y on log x (y ~ x^k gives k)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    var = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / var if var else float("nan")


# ---------------------------------------------------------------------- output
def fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0"


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def command_line() -> str:
    """The command that ran this script, relative to the repository root."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO)
    return " ".join(["python", shlex.quote(script), *map(shlex.quote, sys.argv[1:])])


def write_result(
    name: str, title: str, body: str, started: float, load_start: str, out_dir: Path | None = None
) -> Path:
    """Print ``body`` and write it to ``<out_dir>/<name>.md`` with the command, machine and loads."""
    out_dir = out_dir or RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    text = "\n".join(
        [
            f"## {title}",
            "",
            f"Command (from the repository root): `{command_line()}`",
            "",
            f"Run at {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {time.time() - started:.0f} s wall time; "
            f"load average at the start {load_start}.",
            *machine_lines(),
            "",
            body.rstrip(),
            "",
        ]
    )
    path = out_dir / f"{name}.md"
    path.write_text(text)
    print(text)
    print(f"written to {os.path.relpath(path, REPO)}")
    return path


def bare_generate(model, tok, ids, mask, max_new_tokens: int):
    """A bare batched ``model.generate`` at temperature 1 (no top-p/top-k): the baseline engines race."""
    return model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=max_new_tokens,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        use_cache=True,
    )
