"""HP-RLVR with one rollout per prompt (G = 1) against GRPO with G = 8 on the quickstart task.

Both methods see the same prompts at every step (the training stream is a pure
function of the step and ``data.batch_size`` is shared), so GRPO generates 8x
the rollouts. Each (method, seed) is one ``lightning-rlvr fit`` in its own
process; this script reads the runs' ``metrics.csv`` and reports validation
pass@1 over training wall time (the sum of the logged rollout, scoring, credit
and update times: validation time excluded) and over rollouts generated, plus
the training reward. It writes a markdown table and a PNG plot.

The paper's abstract claims 1.21x-2.30x faster training than GRPO with 1/8 of
the rollouts; the table reports the wall-time and rollout ratios to reach a
target pass@1 (a fraction of GRPO's final mean) so the claim can be checked.

    OMP_NUM_THREADS=1 python benchmarks/hp_rlvr_learning.py                      # full: 6 fits
    OMP_NUM_THREADS=1 python benchmarks/hp_rlvr_learning.py --max_steps 4 --val_check_interval 2 \\
        --extra_config tests/configs/tiny.yaml --seeds 0 --out /tmp/hp_smoke      # smoke test
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lightning_rlvr.core.process import child_env  # the fits it starts die with it

REPO = Path(__file__).resolve().parents[1]
METHODS = {
    # name: (method config, group size)
    "HP-RLVR (G=1)": ("configs/method/hp_rlvr.yaml", 1),
    "GRPO (G=8)": ("configs/method/grpo.yaml", 8),
}
TIME_KEYS = ("time/rollout_s", "time/score_s", "time/credit_s", "time/update_s")


@dataclass
class Run:
    """One fit's curves, read back from its metrics.csv."""

    method: str
    seed: int
    group_size: int
    batch_size: int
    wall_s: float = 0.0  # process wall time (including warm start and validation)
    steps: list[int] = field(default_factory=list)  # training steps done (1-based)
    train_time: list[float] = field(default_factory=list)  # cumulative training seconds after each step
    reward: list[float] = field(default_factory=list)  # train/reward_mean per step
    val_steps: list[int] = field(default_factory=list)  # steps done at each validation (0 = before RL)
    val_pass: list[float] = field(default_factory=list)

    def time_at(self, step: int) -> float:
        return 0.0 if step == 0 else self.train_time[min(step, len(self.train_time)) - 1]

    def rollouts_at(self, step: int) -> int:
        return step * self.batch_size * self.group_size


def read_metrics(path: Path, run: Run) -> Run:
    """Fill ``run`` from a CSVLogger metrics.csv (the first val row is the pre-RL baseline)."""
    rows = list(csv.DictReader(path.open()))
    train = {}
    for r in rows:
        if r.get("train/reward_mean"):
            train[int(r["step"])] = r
    for s in sorted(train):
        r = train[s]
        run.steps.append(s + 1)
        dt = sum(float(r[k]) for k in TIME_KEYS if r.get(k))
        run.train_time.append((run.train_time[-1] if run.train_time else 0.0) + dt)
        run.reward.append(float(r["train/reward_mean"]))
    first = True
    for r in rows:
        if r.get("val/pass@1"):
            run.val_steps.append(0 if first else int(r["step"]) + 1)
            run.val_pass.append(float(r["val/pass@1"]))
            first = False
    order = sorted(range(len(run.val_steps)), key=lambda i: run.val_steps[i])
    run.val_steps = [run.val_steps[i] for i in order]
    run.val_pass = [run.val_pass[i] for i in order]
    return run


def fit(method: str, seed: int, args: argparse.Namespace) -> Run:
    """Run one fit in a subprocess (or reuse it with --reuse) and read its metrics."""
    config, group_size = METHODS[method]
    name = f"{'hp_rlvr' if group_size == 1 else 'grpo'}_seed{seed}"
    root = Path(args.workdir) / name
    metrics = root / "logs" / "bench" / "version_0" / "metrics.csv"
    meta = root / "meta.json"
    run = Run(method, seed, group_size, args.batch_size)
    if not (args.reuse and metrics.exists() and meta.exists()):
        if root.exists():
            subprocess.run(["rm", "-rf", str(root)], check=True)
        cli = ["fit", "--config", str(REPO / "configs/quickstart.yaml"), "--config", str(REPO / config)]
        for extra in args.extra_config:
            cli += ["--config", str(REPO / extra)]
        cli += [
            "--seed_everything",
            str(seed),
            "--model.group_size",
            str(group_size),
            "--data.batch_size",
            str(args.batch_size),
            "--trainer.logger.init_args.save_dir",
            str(root / "logs"),
            "--trainer.logger.init_args.name",
            "bench",
            "--trainer.enable_progress_bar",
            "false",
            "--checkpoint.dirpath",
            str(root / "checkpoints"),
            "--checkpoint.every_n_train_steps",
            "100000",
        ]
        if args.max_steps:
            cli += ["--trainer.max_steps", str(args.max_steps)]
        if args.val_check_interval:
            cli += ["--trainer.val_check_interval", str(args.val_check_interval)]
        code = f"from lightning_rlvr.cli import main; main({cli!r})"
        env = {**os.environ, **child_env(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        t0 = time.perf_counter()
        print(f"[{method} seed {seed}] fit ...", flush=True)
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=root.parent, env=env, capture_output=True, text=True
        )
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"fit failed for {method} seed {seed}:\n{proc.stderr[-3000:]}")
        meta.write_text(json.dumps({"wall_s": wall}))
        print(f"[{method} seed {seed}] done in {wall:.0f} s", flush=True)
    run.wall_s = json.loads(meta.read_text())["wall_s"]
    return read_metrics(metrics, run)


def mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / max(len(xs) - 1, 1))


def first_reaching(run: Run, target: float) -> int | None:
    """Steps done at the first validation with pass@1 >= target (None if never)."""
    for s, v in zip(run.val_steps, run.val_pass):
        if s > 0 and v >= target:
            return s
    return None


def report(runs: list[Run], args: argparse.Namespace) -> str:
    by_method = {m: [r for r in runs if r.method == m] for m in METHODS}
    lines = [
        "# HP-RLVR (G = 1) vs GRPO (G = 8): learning speed on the quickstart task",
        "",
        f"Generated by `benchmarks/hp_rlvr_learning.py` ({time.strftime('%Y-%m-%d %H:%M')}); configs: "
        f"`configs/quickstart.yaml` + method YAML"
        + "".join(f" + `{c}`" for c in args.extra_config)
        + f"; {args.batch_size} prompts per step (the same prompts for both methods); "
        f"max_steps = {args.max_steps or 'quickstart default'}; seeds {args.seeds}; "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')} on a shared machine "
        "(wall times are noisy).",
        "",
        "Training time = sum of the logged rollout + scoring + credit + update seconds "
        "(validation excluded).",
        "",
        "| method | final val pass@1 | best val pass@1 | train reward (last 10 steps) | train time (s) "
        "| time / step (s) | rollouts | fit wall (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m, rs in by_method.items():
        if not rs:
            continue
        fin = mean_std([r.val_pass[-1] for r in rs])
        best = mean_std([max(r.val_pass[1:] or r.val_pass) for r in rs])
        rew = mean_std([sum(r.reward[-10:]) / len(r.reward[-10:]) for r in rs])
        tt = mean_std([r.train_time[-1] for r in rs])
        per = mean_std([r.train_time[-1] / len(r.train_time) for r in rs])
        lines.append(
            f"| {m} | {fin[0]:.3f} ± {fin[1]:.3f} | {best[0]:.3f} ± {best[1]:.3f} "
            f"| {rew[0]:.3f} ± {rew[1]:.3f} "
            f"| {tt[0]:.1f} ± {tt[1]:.1f} | {per[0]:.3f} | {rs[0].rollouts_at(rs[0].steps[-1])} "
            f"| {mean_std([r.wall_s for r in rs])[0]:.0f} |"
        )
    base = [r.val_pass[0] for r in runs if r.val_steps and r.val_steps[0] == 0]
    if base:
        lines += ["", f"Pass@1 before RL (warm start): {mean_std(base)[0]:.3f}."]
    grpo, hp = by_method["GRPO (G=8)"], by_method["HP-RLVR (G=1)"]
    if grpo and hp and mean_std([r.val_pass[-1] for r in grpo])[0] <= (mean_std(base)[0] if base else 0.0):
        lines += ["", "GRPO did not improve on the warm start, so there is no target pass@1 to time."]
    elif grpo and hp:
        g_final = mean_std([r.val_pass[-1] for r in grpo])[0]
        g0 = mean_std(base)[0] if base else 0.0
        lines += [
            "",
            "## Time and rollouts to reach a target val pass@1",
            "",
            "Target = warm-start pass@1 + fraction x (GRPO's mean final pass@1 - warm-start pass@1); "
            "per seed, the first validation at or above the target (validations are every "
            f"{args.val_check_interval or 25} steps, so this is coarse). "
            "Speed-up = GRPO / HP-RLVR (> 1: HP-RLVR faster).",
            "",
            "| fraction | target | GRPO time (s) | HP-RLVR time (s) | time speed-up | GRPO rollouts "
            "| HP-RLVR rollouts | rollout ratio | HP-RLVR seeds reaching |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for frac in (0.5, 0.8, 1.0):
            target = g0 + frac * (g_final - g0)
            cells = []
            for rs in (grpo, hp):
                hit = [(r, first_reaching(r, target)) for r in rs]
                ok = [(r, s) for r, s in hit if s is not None]
                t = mean_std([r.time_at(s) for r, s in ok])[0] if ok else float("nan")
                n = mean_std([float(r.rollouts_at(s)) for r, s in ok])[0] if ok else float("nan")
                cells.append((t, n, len(ok), len(rs)))
            (gt, gn, _, _), (ht, hn, hk, hN) = cells

            def fmt(x: float, spec: str, suffix: str = "") -> str:
                return "not reached" if math.isnan(x) else f"{x:{spec}}{suffix}"

            speed = gt / ht if ht and not math.isnan(ht) else float("nan")
            ratio = gn / hn if hn and not math.isnan(hn) else float("nan")
            lines.append(
                f"| {frac:.1f} | {target:.3f} | {fmt(gt, '.1f')} | {fmt(ht, '.1f')} "
                f"| {fmt(speed, '.2f', 'x')} | {fmt(gn, '.0f')} | {fmt(hn, '.0f')} "
                f"| {fmt(ratio, '.1f', 'x')} | {hk}/{hN} |"
            )
        gains = {m: mean_std([r.val_pass[-1] - r.val_pass[0] for r in rs])[0] for m, rs in by_method.items()}
        lines += [
            "",
            "Mean val pass@1 gain over the warm start at the last step: "
            + "; ".join(f"{m}: {g:+.3f}" for m, g in gains.items())
            + ".",
        ]
    lines += [
        "",
        "## Per run",
        "",
        "| method | seed | val pass@1 at steps | train time (s) |",
        "|---|---|---|---|",
    ]
    for r in runs:
        curve = ", ".join(f"{s}:{v:.3f}" for s, v in zip(r.val_steps, r.val_pass))
        lines.append(f"| {r.method} | {r.seed} | {curve} | {r.train_time[-1]:.1f} |")
    return "\n".join(lines) + "\n"


def plot(runs: list[Run], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    colors = {"HP-RLVR (G=1)": "tab:red", "GRPO (G=8)": "tab:blue"}
    for r in runs:
        c = colors[r.method]
        label = r.method if r.seed == min(x.seed for x in runs if x.method == r.method) else None
        axes[0].plot([r.time_at(s) for s in r.val_steps], r.val_pass, "o-", color=c, alpha=0.7, label=label)
        axes[1].plot(
            [r.rollouts_at(s) for s in r.val_steps], r.val_pass, "o-", color=c, alpha=0.7, label=label
        )
        k = 10
        smooth = [
            sum(r.reward[max(0, i - k + 1) : i + 1]) / len(r.reward[max(0, i - k + 1) : i + 1])
            for i in range(len(r.reward))
        ]
        axes[2].plot([r.rollouts_at(s) for s in r.steps], smooth, color=c, alpha=0.7, label=label)
    axes[0].set(xlabel="training wall time (s)", ylabel="val pass@1", title="accuracy over wall time")
    axes[1].set(xlabel="rollouts generated", ylabel="val pass@1", title="accuracy over rollouts")
    axes[1].set_xscale("symlog", linthresh=100)
    axes[2].set(xlabel="rollouts generated", ylabel="train reward (10-step mean)", title="training reward")
    axes[2].set_xscale("symlog", linthresh=100)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--max_steps", type=int, default=0, help="0: the quickstart's 100")
    p.add_argument("--val_check_interval", type=int, default=0, help="0: the quickstart's 25")
    p.add_argument("--batch_size", type=int, default=16, help="prompts per step (both methods)")
    p.add_argument(
        "--extra_config", nargs="*", default=[], help="more configs composed last (e.g. tiny scale)"
    )
    p.add_argument("--workdir", default="/tmp/hp_rlvr_bench", help="where the runs go")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="table + plot folder")
    p.add_argument("--reuse", action="store_true", help="read finished runs instead of refitting")
    args = p.parse_args(argv)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [fit(m, s, args) for s in args.seeds for m in METHODS]
    text = report(runs, args)
    if plot(runs, out / "hp_rlvr_learning.png"):
        text += "\n![accuracy over wall time and rollouts](hp_rlvr_learning.png)\n"
    (out / "hp_rlvr_learning.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
