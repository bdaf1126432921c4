"""HP-RLVR (G = 1) against GRPO (G = 8) on the household family (TextWorld cooking games).

Both methods are compared at **equal rollout budget**: every run samples the same number of
episodes. By default (``--budget prompts``) HP-RLVR gets 8x the prompts per step (B x 8 prompts, one
episode each) for the same number of steps, so both make the same number of optimiser updates from
the same number of episodes and validate at the same episode counts; ``--budget steps`` instead
gives HP-RLVR the GRPO batch of B prompts and 8x the steps (8x the updates, each from B episodes).
They are also compared at **equal training wall time**: each run's val success at the last
validation done within the shortest run's training time.

Each (method, seed) is a ``python -m lightning_rlvr.cli fit`` of ``configs/quickstart_agent.yaml``
+ the method YAML + its episode settings ``configs/agent/<method>.yaml`` when there is one (HP-RLVR's
hindsight for a word vocabulary; the sweeps use the same file) + overrides from this script (so it
follows whatever the quickstart becomes), followed by a ``test`` of its last checkpoint. All runs
share one ``$LIGHTNING_RLVR_CACHE``: the game pool and the warm start (whose seed is its own, not the
run's) are built once and every run starts from the same weights; seeds change the RL sampling only.
Finished runs (a ``done.json`` in their folder) are skipped, so an interrupted benchmark resumes
where it stopped.

Reported (``experiments.stats``): final val and test success (mean, 95% t-interval over seeds and
the paired HP-RLVR - GRPO difference), val success at equal wall time, episodes and training seconds
to reach a fixed val success rate (``--target``), and ``train/zero_grad_frac`` (share of update
records whose gradient norm is exactly 0: the paper reports 43-49% for GRPO on ALFWorld and none for
HP-RLVR) with GRPO's ``train/frac_zero_std`` (share of groups whose G rewards are all equal).
Training time = the sum of the logged rollout, scoring, credit and update seconds (validation,
testing and process start excluded). GRPO's update records hold B prompts each, so one is exactly zero
only when all B groups are (``train/frac_zero_std`` = 1 on that step).

Cost (measured on the shared 2-core machine, load ~3-4, 32 episodes a step, observations without
TextWorld's fixed sentences): GRPO ~5-12 s a step; HP-RLVR ~20 s, most of it its credit: one hindsight
forward per (episode, action). Default (10 GRPO steps, 3 seeds): 138-195 s per GRPO fit + test and
283-293 s per HP-RLVR one, ~22 min in all with the pool and warm start cached (a fresh cache adds
~3.5 min once). 10 GRPO steps are far fewer than the ~60-90 the quickstart needs to move val success.

    OMP_NUM_THREADS=1 python benchmarks/agent_hp_rlvr.py                          # default: ~30 min
    OMP_NUM_THREADS=1 python benchmarks/agent_hp_rlvr.py --grpo_steps 40 --val_every 5   # bigger
    OMP_NUM_THREADS=1 python benchmarks/agent_hp_rlvr.py --grpo_steps 2 --val_every 1 \\
        --out /tmp/agent_smoke --workdir /tmp/agent_smoke_runs                     # smoke run
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import command_line, fmt, load_average, machine_lines, md_table  # noqa: E402
from lightning_rlvr.experiments.stats import paired_comparison, t_interval, time_to_reach  # noqa: E402

GRPO, HP = "GRPO (G=8)", "HP-RLVR (G=1)"
METHODS = {  # name: (key, method config, group size)
    GRPO: ("grpo", "configs/method/grpo.yaml", 8),
    HP: ("hp_rlvr", "configs/method/hp_rlvr.yaml", 1),
}
TIME_KEYS = ("time/rollout_s", "time/score_s", "time/credit_s", "time/update_s")
AGENT_CONFIGS = "configs/agent"  # a method's settings for episodes, composed after its method file
HINDSIGHT_KEYS = ("hindsight_template", "separator", "pass_text", "fail_text")  # named in the report


def method_configs(config: str) -> list[str]:
    """A method file and, when there is one, its episode settings ``configs/agent/<stem>.yaml``."""
    overlay = Path(AGENT_CONFIGS) / Path(config).name
    return [config] + ([str(overlay)] if (REPO / overlay).is_file() else [])


def hindsight_settings() -> dict:
    """HP-RLVR's credit settings on episodes: the method file's, then the environment's own texts."""
    from lightning_rlvr.credit.hp_rlvr import HPRLVRCredit
    from lightning_rlvr.envs.base import Environment

    merged: dict = {}
    for config in method_configs(METHODS[HP][1]):
        model = (yaml.safe_load((REPO / config).read_text()) or {}).get("model", {})
        merged.update(model.get("credit", {}).get("init_args", {}))
    return {**HPRLVRCredit.settings_from(Environment.role_texts), **merged}


# ---------------------------------------------------------------------- budget arithmetic
@dataclass(frozen=True)
class Plan:
    """One method's schedule: prompts per step, group size, steps and validation interval (in steps)."""

    batch_size: int
    group_size: int
    max_steps: int
    val_every: int

    @property
    def episodes_per_step(self) -> int:
        return self.batch_size * self.group_size

    @property
    def episodes(self) -> int:
        return self.max_steps * self.episodes_per_step


def plan_for(
    group_size: int, grpo_group: int, batch_size: int, grpo_steps: int, val_every: int, budget: str
) -> Plan:
    """The schedule that gives a method of ``group_size`` the episodes of GRPO's ``grpo_steps`` steps.

    GRPO: ``batch_size`` prompts x ``grpo_group`` episodes per step. A method with fewer episodes per
    prompt makes up the ratio r = grpo_group / group_size either in prompts per step
    (``budget="prompts"``: B*r prompts, same steps, same validation steps) or in steps
    (``budget="steps"``: r x the steps and r x the validation interval). Either way both validate
    at the same episode counts and finish at the same total.
    """
    if grpo_group % group_size:
        raise ValueError(f"group size {group_size} must divide GRPO's {grpo_group} for an equal budget")
    if budget not in ("prompts", "steps"):
        raise ValueError(f"budget must be 'prompts' or 'steps', got {budget!r}")
    r = grpo_group // group_size
    if budget == "prompts":
        return Plan(batch_size * r, group_size, grpo_steps, val_every)
    return Plan(batch_size, group_size, grpo_steps * r, val_every * r)


# ---------------------------------------------------------------------- one run
@dataclass
class Run:
    """One fit's curves, read back from its metrics.csv (and its test's)."""

    method: str
    seed: int
    plan: Plan
    wall_s: float = 0.0  # fit + test process wall time
    steps: list[int] = field(default_factory=list)  # training steps done (1-based)
    train_time: list[float] = field(default_factory=list)  # cumulative training seconds after each step
    zero_grad: list[float] = field(default_factory=list)  # train/zero_grad_frac per step
    zero_std: list[float] = field(default_factory=list)  # train/frac_zero_std per step
    success: list[float] = field(default_factory=list)  # train/success per step
    val_steps: list[int] = field(default_factory=list)  # steps done at each validation (0 = before RL)
    val: list[float] = field(default_factory=list)  # val/pass@1: success rate on held-out games
    test: float = math.nan

    def time_at(self, step: int) -> float:
        return (
            0.0 if step == 0 or not self.train_time else self.train_time[min(step, len(self.train_time)) - 1]
        )

    def episodes_at(self, step: int) -> int:
        return step * self.plan.episodes_per_step

    def curve(self, axis: str) -> list[tuple[float, float]]:
        """(episodes or training seconds, val success) at every validation, in order."""
        x = self.episodes_at if axis == "episodes" else self.time_at
        return [(float(x(s)), v) for s, v in zip(self.val_steps, self.val)]

    def val_within(self, seconds: float) -> float:
        """Val success at the last validation done within ``seconds`` of training."""
        out = math.nan
        for t, v in self.curve("seconds"):
            if t <= seconds + 1e-9:
                out = v
        return out


def _f(row: dict[str, str], key: str) -> float | None:
    v = row.get(key)
    return float(v) if v not in (None, "") else None


def read_metrics(path: Path, run: Run) -> Run:
    """Fill ``run`` from a CSVLogger metrics.csv (rows in logging order; a val row before any train row
    is the pre-RL baseline, logged at step 0 when ``model.validate_at_start``)."""
    rows = list(csv.DictReader(path.open()))
    train = {int(r["step"]): r for r in rows if r.get("time/rollout_s")}
    for s in sorted(train):
        r = train[s]
        run.steps.append(s + 1)
        dt = sum(_f(r, k) or 0.0 for k in TIME_KEYS)
        run.train_time.append((run.train_time[-1] if run.train_time else 0.0) + dt)
        for key, out in (
            ("train/zero_grad_frac", run.zero_grad),
            ("train/frac_zero_std", run.zero_std),
            ("train/success", run.success),
        ):
            v = _f(r, key)
            if v is not None:
                out.append(v)
    pairs, trained = [], False  # a val row before any train row is the pre-RL one (validate_at_start)
    for r in rows:
        trained = trained or bool(r.get("time/rollout_s"))
        if r.get("val/pass@1"):
            pairs.append((int(r["step"]) + 1 if trained else 0, float(r["val/pass@1"])))
    pairs.sort(key=lambda p: p[0])
    run.val_steps, run.val = [p[0] for p in pairs], [p[1] for p in pairs]
    return run


def fit_and_test(method: str, seed: int, plan: Plan, args: argparse.Namespace) -> Run:
    """Fit one (method, seed) and test its last checkpoint in subprocesses, unless already done."""
    key, config, _ = METHODS[method]
    root = Path(args.workdir) / f"{key}_seed{seed}"
    done = root / "done.json"
    run = Run(method, seed, plan)
    if not done.exists():
        if root.exists():  # an interrupted run: start it again from scratch
            shutil.rmtree(root)
        root.mkdir(parents=True)
        configs = ["--config", str(REPO / args.config)]
        for c in method_configs(config):
            configs += ["--config", str(REPO / c)]
        for extra in args.extra_config:
            configs += ["--config", str(REPO / extra)]
        fit = [
            "fit",
            *configs,
            "--seed_everything",
            str(seed),
            "--model.group_size",
            str(plan.group_size),
            "--data.batch_size",
            str(plan.batch_size),
            "--trainer.max_steps",
            str(plan.max_steps),
            "--trainer.val_check_interval",
            str(plan.val_every),
            "--trainer.default_root_dir",
            str(root),
            "--trainer.logger.init_args.save_dir",
            str(root / "logs"),
            "--trainer.logger.init_args.name",
            "fit",
            "--trainer.enable_progress_bar",
            "false",
            "--checkpoint.dirpath",
            str(root / "checkpoints"),
            "--checkpoint.save_last",
            "true",
            "--checkpoint.every_n_train_steps",
            str(plan.max_steps),
            *args.override,
        ]
        test = [
            "test",
            *configs,
            "--seed_everything",
            str(seed),
            "--model.group_size",
            str(plan.group_size),
            "--trainer.default_root_dir",
            str(root),
            "--trainer.logger.init_args.save_dir",
            str(root / "logs"),
            "--trainer.logger.init_args.name",
            "test",
            "--trainer.enable_progress_bar",
            "false",
            "--ckpt_path",
            str(root / "checkpoints" / "last.ckpt"),
            *args.override,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env.setdefault("LIGHTNING_RLVR_CACHE", str(Path(args.workdir) / "cache"))
        t0 = time.perf_counter()
        for name, cli in (("fit", fit), ("test", test)):
            what = f"{plan.max_steps} steps x {plan.batch_size} prompts x G={plan.group_size}"
            what = f"{what} = {plan.episodes} episodes" if name == "fit" else "last checkpoint"
            print(f"[{method} seed {seed}] {name}: {what}, load {load_average()} ...", flush=True)
            with (root / f"{name}.log").open("w") as log:
                proc = subprocess.run(
                    [sys.executable, "-m", "lightning_rlvr.cli", *cli],
                    cwd=root,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if proc.returncode != 0:
                tail = (root / f"{name}.log").read_text()[-3000:]
                raise SystemExit(f"{name} failed for {method} seed {seed} (log {root / name}.log):\n{tail}")
        wall = time.perf_counter() - t0
        done.write_text(json.dumps({"wall_s": wall, "plan": vars(plan)}))
        print(f"[{method} seed {seed}] done in {wall:.0f} s", flush=True)
    else:
        print(f"[{method} seed {seed}] already done: {done}", flush=True)
    run.wall_s = json.loads(done.read_text())["wall_s"]
    read_metrics(root / "logs" / "fit" / "version_0" / "metrics.csv", run)
    test_rows = list(csv.DictReader((root / "logs" / "test" / "version_0" / "metrics.csv").open()))
    run.test = next((float(r["test/pass@1"]) for r in test_rows if r.get("test/pass@1")), math.nan)
    return run


# ---------------------------------------------------------------------- summary
def interval(values: list[float], digits: int = 3) -> str:
    """``mean [low, high]`` (95% t-interval over seeds); ``mean`` alone for one seed."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    m, lo, hi = t_interval(values)
    return fmt(m, digits) if math.isnan(lo) else f"{fmt(m, digits)} [{fmt(lo, digits)}, {fmt(hi, digits)}]"


def paired(x: list[Run], y: list[Run], value) -> str:
    """HP-RLVR - GRPO of ``value(run)``, paired by seed: difference [interval], p and the MDD."""
    c = paired_comparison({r.seed: value(r) for r in x}, {r.seed: value(r) for r in y})
    if c.n < 2:
        return f"{fmt(c.diff)} (n = {c.n}: no interval)"
    return f"{fmt(c.diff)} [{fmt(c.low)}, {fmt(c.high)}], p = {c.p_value:.2f}, MDD {fmt(c.mdd)}"


def mean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def default_target(runs: list[Run]) -> float:
    """The warm start's mean val success + 0.1, on the 1/32 grid of 8 games x 4 samples, capped at 1."""
    base = mean([r.val[0] for r in runs if r.val_steps and r.val_steps[0] == 0])
    return min(1.0, math.ceil(((0.0 if math.isnan(base) else base) + 0.1) * 32 - 1e-9) / 32)


def summarize(runs: list[Run], target: float) -> str:
    """The markdown tables: per method, paired differences, time to the target, per run."""
    by = {m: [r for r in runs if r.method == m] for m in METHODS}
    equal_t = min((r.train_time[-1] for r in runs if r.train_time), default=math.nan)
    lines = [
        f"Target val success: {target:.3f}. Equal wall time: the shortest run's training time, "
        f"{equal_t:.0f} s (each run's last validation within it). Intervals: 95% t over seeds.",
        "",
    ]
    rows = []
    for m, rs in by.items():
        if not rs:
            continue
        rows.append(
            [
                m,
                f"{rs[0].plan.batch_size} x {rs[0].plan.max_steps}",
                rs[0].plan.episodes,
                interval([r.val[0] for r in rs if r.val_steps[:1] == [0]]),
                interval([r.val[-1] for r in rs]),
                interval([r.test for r in rs]),
                interval([r.val_within(equal_t) for r in rs]),
                interval([time_to_reach(r.curve("episodes"), target) for r in rs], 0),
                interval([time_to_reach(r.curve("seconds"), target) for r in rs], 0),
                f"{sum(not math.isnan(time_to_reach(r.curve('episodes'), target)) for r in rs)}/{len(rs)}",
                interval([mean(r.zero_grad) for r in rs]),
                interval([mean(r.zero_std) for r in rs]),
                interval([mean(r.success) for r in rs]),
                interval([r.train_time[-1] if r.train_time else math.nan for r in rs], 0),
            ]
        )
    lines.append(
        md_table(
            [
                "method",
                "prompts x steps",
                "episodes",
                "val before RL",
                "final val",
                "test",
                "val at equal time",
                "episodes to target",
                "train s to target",
                "seeds reaching",
                "zero_grad_frac",
                "frac_zero_std",
                "train success",
                "train s",
            ],
            rows,
        )
    )
    hp, grpo = by[HP], by[GRPO]
    if hp and grpo:
        lines += [
            "",
            "Paired by seed, HP-RLVR - GRPO (difference [95% interval], two-sided p, minimum detectable "
            "difference at 80% power):",
            "",
            f"- final val success: {paired(hp, grpo, lambda r: r.val[-1])}",
            f"- test success: {paired(hp, grpo, lambda r: r.test)}",
            f"- val success at equal wall time ({equal_t:.0f} s): "
            f"{paired(hp, grpo, lambda r: r.val_within(equal_t))}",
            f"- train/zero_grad_frac: {paired(hp, grpo, lambda r: mean(r.zero_grad))}",
        ]
    lines += ["", "## Per run", ""]
    lines.append(
        md_table(
            [
                "method",
                "seed",
                "val success at episodes (steps)",
                "test",
                "zero_grad_frac",
                "train s",
                "wall s",
            ],
            [
                [
                    r.method,
                    r.seed,
                    ", ".join(f"{r.episodes_at(s)}:{v:.3f}" for s, v in zip(r.val_steps, r.val)),
                    fmt(r.test),
                    fmt(mean(r.zero_grad)),
                    f"{r.train_time[-1]:.0f}" if r.train_time else "-",
                    f"{r.wall_s:.0f}",
                ]
                for r in runs
            ],
        )
    )
    return "\n".join(lines)


def band(runs: list[Run], axis: str, grid: list[float]) -> tuple[list[float], list[float], list[float]]:
    """Mean and min/max over seeds of each run's step-function val curve on ``grid``."""
    cols = []
    for r in runs:
        pts = r.curve(axis)
        cols.append([next((v for t, v in reversed(pts) if t <= x + 1e-9), math.nan) for x in grid])
    mid, lo, hi = [], [], []
    for i in range(len(grid)):
        vs = [c[i] for c in cols if not math.isnan(c[i])]
        mid.append(mean(vs))
        lo.append(min(vs) if vs else math.nan)
        hi.append(max(vs) if vs else math.nan)
    return mid, lo, hi


def plot(runs: list[Run], target: float, path: Path) -> bool:
    """Val success vs episodes and vs training seconds: mean line and min-max band per method."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {HP: "tab:red", GRPO: "tab:blue"}
    for m in METHODS:
        rs = [r for r in runs if r.method == m]
        if not rs:
            continue
        for ax, axis in zip(axes, ("episodes", "seconds")):
            xs = sorted({x for r in rs for x, _ in r.curve(axis)})
            if axis == "seconds":  # a dense grid: the seeds validate at different seconds
                end = max(xs)
                xs = [end * i / 200 for i in range(201)]
            mid, lo, hi = band(rs, axis, xs)
            step = "post" if axis == "seconds" else None
            ax.plot(
                xs,
                mid,
                color=colors[m],
                label=f"{m} (mean of {len(rs)})",
                drawstyle="steps-post" if step else "default",
                marker=None if step else "o",
            )
            ax.fill_between(xs, lo, hi, color=colors[m], alpha=0.2, step=step)
    for ax, xlabel in zip(axes, ("episodes sampled", "training seconds (validation excluded)")):
        ax.axhline(target, color="gray", ls="--", lw=1, label=f"target {target:.3f}")
        ax.set(xlabel=xlabel, ylabel="val success rate")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title("val success vs episodes (band: min-max over seeds)")
    axes[1].set_title("val success vs training wall time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--grpo_steps", type=int, default=10, help="GRPO's RL steps (sets the episode budget)")
    p.add_argument("--val_every", type=int, default=2, help="GRPO's validation interval in steps")
    p.add_argument("--batch_size", type=int, default=4, help="GRPO's prompts per step")
    p.add_argument(
        "--budget",
        choices=("prompts", "steps"),
        default="prompts",
        help="how HP-RLVR gets GRPO's episodes: 8x prompts per step (default) or 8x steps",
    )
    p.add_argument(
        "--target", type=float, default=None, help="val success to time (default: warm start + 0.1)"
    )
    p.add_argument("--config", default="configs/quickstart_agent.yaml")
    p.add_argument("--extra_config", nargs="*", default=[], help="configs composed after the method's")
    p.add_argument(
        "--override", nargs="*", default=[], help="dotted CLI flags for every fit, e.g. --model.lr=1e-4"
    )
    p.add_argument(
        "--workdir", default="/tmp/agent_hp_rlvr", help="runs + shared cache (unless $LIGHTNING_RLVR_CACHE)"
    )
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="table + plot folder")
    args = p.parse_args(argv)
    started, load_start = time.time(), load_average()
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    plans = {
        m: plan_for(g, METHODS[GRPO][2], args.batch_size, args.grpo_steps, args.val_every, args.budget)
        for m, (_, _, g) in METHODS.items()
    }
    # GRPO first on the first seed: whichever fit comes first builds the shared pool and warm start.
    runs = [fit_and_test(m, s, plans[m], args) for s in args.seeds for m in (GRPO, HP)]
    target = args.target if args.target is not None else default_target(runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compute = sum(r.wall_s for r in runs)
    hindsight = {k: v for k, v in hindsight_settings().items() if k in HINDSIGHT_KEYS}
    body = [
        "# HP-RLVR (G = 1) vs GRPO (G = 8) on TextWorld cooking games (household family)",
        "",
        f"Command (from the repository root): `OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')} "
        f"{command_line()}`",
        "",
        f"Configs: `{args.config}` + the method YAML (+ `{AGENT_CONFIGS}/<method>.yaml` where there is one)"
        + "".join(f" + `{c}`" for c in args.extra_config)
        + (f"; overrides {' '.join(args.override)}" if args.override else "")
        + f"; HP-RLVR's hindsight for episodes: `{json.dumps(hindsight)}`. "
        f"Equal rollout budget by **{args.budget}**: "
        + "; ".join(
            f"{m}: {pl.batch_size} prompts x G={pl.group_size} x {pl.max_steps} steps = {pl.episodes} "
            f"episodes, validation every {pl.val_every} steps"
            for m, pl in plans.items()
        )
        + f". Seeds {args.seeds} (RL sampling; one shared warm start).",
        "",
        f"Compute: {compute:.0f} s in fits and tests ({time.time() - started:.0f} s this invocation; "
        f"finished runs are reused), load average at the start {load_start}.",
        *machine_lines(),
        "",
        "val/test success = share of won episodes on the held-out games (val/pass@1, test/pass@1). "
        "zero_grad_frac = share of update records with gradient norm exactly 0 (mean over steps); "
        "frac_zero_std = share of prompts whose episodes all got the same reward (GRPO: no signal; "
        "HP-RLVR at G=1: always 1, unused by its credit).",
        "",
        summarize(runs, target),
    ]
    text = "\n".join(body) + "\n"
    if plot(runs, target, out / "agent_hp_rlvr.png"):
        text += "\n![val success vs episodes and vs wall time](agent_hp_rlvr.png)\n"
    (out / "agent_hp_rlvr.md").write_text(text)
    print(text)
    print(f"written to {out / 'agent_hp_rlvr.md'}")


if __name__ == "__main__":
    main()
