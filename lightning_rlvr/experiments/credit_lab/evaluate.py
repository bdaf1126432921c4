"""The credit lab: does each method's token credit land where the true credit is? One table.

    lightning-rlvr-credit-eval --ckpt_path runs/quickstart/checkpoints/last.ckpt \\
        --methods configs/method/*.yaml --out benchmarks/results/credit_eval

For P held-out prompts the checkpoint's policy samples groups of G completions,
the task verifies them, and on THE SAME rollouts (and the same scorer design)

* the **oracle** -- Monte-Carlo credit (``MonteCarloCredit``, raw value
  differences) with ``--oracle-samples`` continuations per cut every
  ``--oracle-every`` tokens -- estimates each segment's true advantage;
* every method's credit assigner (built from its YAML's ``model.credit``) gives
  its per-token credit: its advantages, minus its per-token loss for
  distillation-style methods (``credit_lab.view.method_credit``);
* the task, when it can (``Task.first_error``), says where each failed
  completion first goes wrong (a character offset, mapped here to the token
  that holds it; None when unknown).

Per method (``credit_lab/metrics.py`` defines each): Spearman correlation with the
oracle per rollout; localisation share within +-d tokens of the first error
against the uniform share; sign agreement with the oracle; cost (tokens run
through the model, sampled ones included, and seconds of ``assign``, per
group), each with a group-bootstrap 95% interval. And two papers' claims on
the same rollouts: SHEAR's (its span distance to the opposite group is larger
after the first error than before) and HSD's (its distillation signal
concentrates at the first error), as the share of groups where each holds.

Writes credit_eval.csv, credit_eval.md (the table + claims) and credit_eval.png. A killed lab rerun
with the same command resumes after its last finished batch, to the same numbers (``credit_lab/totals.py``).
"""

from __future__ import annotations

import argparse
import logging
import math
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from ...core.errors import RLVRError, exit_with_one_line, user_error
from ...core.files import write_text
from ...core.progress import Progress
from ...core.rng import seeded
from .ceiling import agreement, ceiling, curve, share, split_oracle, write_curve
from .claims import record_claims
from .first_error import first_error_tokens
from .metrics import (
    Summary,
    coverage,
    is_constant,
    localisation,
    sign_agreement,
    spearman_or_zero,
    summarise,
)
from .report import markdown, plot, write_claims, write_csv, write_method_metrics
from .totals import Records, run_key
from .totals import clear as clear_totals
from .totals import load as load_totals
from .totals import save as save_totals
from .view import DEFAULT_METHODS, assign_all, load_module_and_methods, method_files

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- per-method records
def record_batch(
    records: dict[str, Records],
    views,
    oracle: Tensor,
    errors: list[int | None],
    rollout,
    group_offset: int,
    d: int,
) -> None:
    """Add one batch's per-rollout metrics of every method to ``records``."""
    lengths = rollout.lengths.tolist()
    for v in views:
        rec = records.setdefault(v.name, Records(cls=v.cls))
        rec.tokens += v.forward_tokens
        rec.seconds += v.seconds
        for name, value in v.metrics.items():
            rec.metrics.setdefault(name, []).append(float(value))
        for i, L in enumerate(lengths):
            if L < 1:
                continue
            g = group_offset + int(rollout.group[i])
            w, o = v.advantages[i, :L], oracle[i, :L]
            rho = spearman_or_zero(w, o)
            rec.spearman.append(rho)
            rec.ranked.append(None if rho is None else float(not is_constant(w)))
            rec.sign.append(sign_agreement(w, o))
            rec.coverage.append(coverage(w, o))
            rec.groups.append(g)
            if errors[i] is not None:
                share, uniform = localisation(w, errors[i], d)
                rec.loc.append(share)
                rec.loc_uniform.append(uniform)
                rec.loc_groups.append(g)


# ---------------------------------------------------------------------------- outputs
def finite_mean(values: list[float]) -> float | None:
    """The mean of the finite values (a method's metric is NaN on a batch where it is undefined), or None."""
    kept = [x for x in values if math.isfinite(x)]
    return sum(kept) / len(kept) if kept else None


def summaries(records: dict[str, Records], n_groups: int, n_boot: int, seed: int, top=None) -> list[dict]:
    """One row a method: each metric's ``Summary``; ``share`` is Spearman over the ceiling ``top``."""
    rows = []
    for name, r in records.items():
        sp = summarise(r.spearman, r.groups, n_boot, seed)
        rows.append(
            {
                "method": name,
                "class": r.cls,
                "spearman": sp,
                "share": Summary(*(share(x, top) for x in (sp.mean, sp.low, sp.high)), sp.n, sp.n_total),
                "ranked": summarise(r.ranked, r.groups, n_boot, seed),
                "localisation": summarise(r.loc, r.loc_groups, n_boot, seed),
                "uniform": summarise(r.loc_uniform, r.loc_groups, n_boot, seed),
                "sign": summarise(r.sign, r.groups, n_boot, seed),
                "coverage": summarise(r.coverage, r.groups, n_boot, seed),
                "tokens_per_group": r.tokens / max(n_groups, 1),
                "seconds_per_group": r.seconds / max(n_groups, 1),
                "metrics": {k: finite_mean(v) for k, v in r.metrics.items()},  # over batches; None: undefined
            }
        )
    return rows


# ---------------------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lightning-rlvr-credit-eval",
        description=(
            "Sample groups for held-out prompts with a checkpoint's policy, run every method's credit "
            "assigner on the same rollouts, and measure each against Monte-Carlo credit and the task's "
            "known first errors."
        ),
    )
    p.add_argument("--ckpt_path", required=True, help="a lightning-rlvr checkpoint (e.g. .../last.ckpt)")
    p.add_argument(
        "--methods",
        nargs="+",
        default=DEFAULT_METHODS,
        help="method YAML files or globs (named by file stem)",
    )
    p.add_argument("--prompts", type=int, default=32, help="held-out prompts P (default 32)")
    p.add_argument(
        "--split", default="test", choices=["train", "val", "test"], help="task split (default test)"
    )
    p.add_argument("--group-size", type=int, default=None, help="G (default: the checkpoint's, at least 2)")
    p.add_argument("--batch-prompts", type=int, default=16, help="prompts sampled and scored together")
    p.add_argument(
        "--oracle-samples",
        type=int,
        default=16,  # docs/credit_lab.md: reliability 0.29 at M = 8, 0.55 at 16, 0.55 at 32
        help="M: continuations per cut of the MC oracle, drawn as two independent halves (default 16)",
    )
    p.add_argument("--oracle-every", type=int, default=4, help="the MC oracle cuts every this many tokens")
    p.add_argument(
        "--window", type=int, default=2, help="d: localisation counts tokens within +-d of the error"
    )
    p.add_argument(
        "--engine",
        default="checkpoint",
        choices=["checkpoint", "hf", "fast"],
        help="what samples the rollouts and the oracle's continuations: the checkpoint's own engine "
        "(default), HFGenerateEngine or FastEngine (same samples up to float near-ties, ~2x faster on "
        "SmolLM2: the oracle is most of the lab's time on a real model)",
    )
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of groups")
    p.add_argument("--seed", type=int, default=0, help="sampling and bootstrap seed")
    p.add_argument("--out", default="credit_eval", help="output directory (default ./credit_eval)")
    p.add_argument(
        "--ceiling-curve",
        type=int,
        nargs="+",
        default=None,
        metavar="M",
        help="also measure the oracle's reliability at each M (e.g. 4 8 16 32) on --ceiling-prompts prompts",
    )
    p.add_argument("--ceiling-prompts", type=int, default=8, help="prompts for --ceiling-curve (default 8)")
    return p


def pass_ticker(bar: Progress, per_batch: int) -> Callable[[], None]:
    """A tick for each pass of one batch: shows "passes k/n of this batch" beside the batch count."""
    passes = iter(range(1, per_batch + 1))
    what = "of this batch (oracle halves, then each method)"
    return lambda: bar.status(passes=f"{next(passes)}/{per_batch} {what}")


def run(args: argparse.Namespace) -> dict:
    from ...collect.continuations import EngineSampler
    from ...scoring.scorer import Scorer

    if (
        min(args.prompts, args.batch_prompts, args.oracle_samples, args.oracle_every, args.ceiling_prompts)
        < 1
    ):
        raise RLVRError(
            "--prompts, --batch-prompts, --oracle-samples, --oracle-every, --ceiling-prompts must be >= 1"
        )
    if args.ceiling_curve is not None and min(args.ceiling_curve) < 1:
        raise RLVRError("--ceiling-curve: every M must be >= 1")
    start = time.perf_counter()
    module, methods = load_module_and_methods(args.ckpt_path, args.methods)
    if args.engine != "checkpoint":
        from ...engines.fast import FastEngine
        from ...engines.hf import HFGenerateEngine

        module.engine = FastEngine() if args.engine == "fast" else HFGenerateEngine()
    G = args.group_size or max(module.group_size, 2)
    if G < 2:
        raise RLVRError("--group-size must be >= 2: the lab compares rollouts within a group")
    problems = [module.task.problem(args.split, i) for i in range(args.prompts)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    given = ("split", "prompts", "batch_prompts", "oracle_samples", "oracle_every", "window", "engine")
    numbers_depend_on = {"G": G, "seed": args.seed, **{k: getattr(args, k) for k in given}}
    key = run_key(args.ckpt_path, method_files(args.methods), numbers_depend_on)
    t = load_totals(out, key, methods)  # a killed lab's finished batches, or none
    starts = range(0, len(problems), args.batch_prompts)
    todo = [b for b in starts if b not in t.done]
    rollouts: dict = {}  # each batch from its own seed: fixed by the seed alone, whatever ran before

    def rollout_of(b: int):
        if b not in rollouts:
            with seeded(args.seed, "rollout", b), torch.no_grad():
                rollouts[b] = module.rollout(problems[b : b + args.batch_prompts], G)
        return rollouts[b]

    for b in todo:  # every rollout first
        rollout_of(b)

    def make_for(rollout):
        return lambda: Scorer(
            module.model, rollout, module.tokenizer, module.micro_batch_size, sampler=EngineSampler.of(module)
        )

    # The bar counts batches, which cost the same, so its time left holds from the first one; a batch's
    # passes (each oracle half, then each method) differ 10x in cost and only show how far it is.
    per_batch = (2 if args.oracle_samples >= 2 else 1) + len(methods)
    bar = Progress(len(todo), "credit lab", f"batches of {args.batch_prompts} prompts")
    for b in todo:
        rollout = rollouts[b]
        make = make_for(rollout)
        tick = pass_ticker(bar, per_batch)
        truth, half_a, half_b, tokens = split_oracle(
            rollout, make, args.oracle_samples, args.oracle_every, (args.seed, "oracle", b), tick
        )  # [N, T] raw MC segment advantages, and its two independent halves
        t.oracle_tokens += tokens
        grpo, views = assign_all(methods, rollout, make, key=(args.seed, "method", b), tick=tick)
        errors = first_error_tokens(module.task, rollout, module.tokenizer)
        record_batch(t.records, views, truth, errors, rollout, b, args.window)
        record_claims(t.claims, views, errors, rollout, grpo, b, args.window)
        for i, L in enumerate(rollout.lengths.tolist()):
            if L >= 1:
                g = b + int(rollout.group[i])
                t.outcome_sign.append(sign_agreement(grpo[i].expand(L), truth[i, :L]))
                t.outcome_g.append(g)
                if half_a is not None:
                    t.half_r.append(agreement(half_a[i, :L], half_b[i, :L], truth[i, :L]))
                    t.half_g.append(g)
        t.n_correct += int(rollout.correct.sum())
        t.n_failed += int((~rollout.correct).sum())
        t.n_known += sum(e is not None for e in errors)
        t.done.append(b)
        save_totals(out, key, t, methods)  # a kill from here on resumes after this batch
        bar.update()  # its line counts batches and the time left (one log of progress, not two)
    bar.close()
    top = ceiling(summarise(t.half_r, t.half_g, args.bootstrap, args.seed))
    rows = summaries(t.records, len(problems), args.bootstrap, args.seed, top["ceiling"][0])
    claim_rows = [c.summary() for c in t.claims.values()]
    known = list(range(t.n_known))
    uniform = summarise([u for r in t.records.values() for u in r.loc_uniform][: t.n_known], known)
    outcome = summarise(t.outcome_sign, t.outcome_g, args.bootstrap, args.seed)
    rel, root = top["reliability"], top["ceiling"]
    reference = {
        "oracle reliability (two independent halves, Spearman-Brown)": _triple(rel),
        "oracle ceiling sqrt(reliability): the true credit would score about this": _triple(root),
        "uniform share at the first error": uniform.cell(),
        "outcome-sign baseline (GRPO's one credit per rollout), sign agreement": outcome.cell(),
    }
    settings = {
        "checkpoint": args.ckpt_path,
        "split": args.split,
        "prompts P": len(problems),
        "group size G": G,
        "engine": type(module.engine).__name__,
        "rollouts": t.n_rows,
        "correct": t.n_correct,
        "failed with a known first error": f"{t.n_known} of {t.n_failed}",
        "MC oracle": f"M = {args.oracle_samples} continuations every {args.oracle_every} tokens (raw)",
        "oracle tokens / group": f"{t.oracle_tokens / len(problems):.0f}",
        "d": args.window,
        "bootstrap": f"{args.bootstrap} group resamples",
        "seed": args.seed,
    }
    curve_rows = None
    if args.ceiling_curve:
        sub = {b: rollout_of(b) for b in starts if b < args.ceiling_prompts}
        curve_rows = curve(
            sub, make_for, sorted(set(args.ceiling_curve)), args.oracle_every, args.seed, args.bootstrap
        )
        note = (
            f"{args.ckpt_path}: {sum(r.num_rows for r in sub.values())} rollouts of the first "
            f"{min(args.ceiling_prompts, len(problems))} {args.split} prompts, "
            f"cuts every {args.oracle_every} tokens"
        )
        print(write_curve(out, curve_rows, note))  # the terminal gets the table, not only the file name
    resumed = len(starts) - len(todo)
    settings["wall time"] = f"{time.perf_counter() - start:.0f} s" + (
        f" (this run; the first {resumed} batches ran before it was killed)" if resumed else ""
    )
    write_csv(out / "credit_eval.csv", rows)
    write_claims(out / "credit_claims.csv", claim_rows)
    write_method_metrics(out / "credit_method_metrics.csv", rows)
    table = markdown(rows, claim_rows, settings, reference, args.window)
    write_text(out / "credit_eval.md", table)
    title = (
        f"Credit lab: {args.ckpt_path}\n{t.n_rows} rollouts "
        f"({len(problems)} {args.split} prompts x G = {G}), "
        f"MC oracle M = {args.oracle_samples} every {args.oracle_every} tokens, 95% group-bootstrap intervals"
    )
    lines = {"ceiling": root[0], "uniform": uniform.mean, "outcome_sign": outcome.mean}
    plot(out / "credit_eval.png", rows, lines, title)
    clear_totals(out)
    print(table)
    log.info("wrote %s/credit_eval.{csv,md,png} in %s", out, settings["wall time"])
    return {
        "rows": rows,
        "claims": claim_rows,
        "settings": settings,
        "reference": reference,
        "ceiling": top,
        "curve": curve_rows,
        "out": out,
    }


def _triple(x) -> str:
    mean, low, high = x
    if mean is None:
        return "undefined"
    return f"{mean:.2f}" if low is None or high is None else f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def main(argv: list[str] | None = None) -> int:
    """Console entry point (``lightning-rlvr-credit-eval``): 0 once the tables are written.

    It returns an exit status, not the results: the console wrapper passes main's value to
    ``sys.exit``, which printed a returned dict to stderr and exited 1 after a good run."""
    evaluate(argv)
    return 0


def evaluate(argv: list[str] | None = None) -> dict:
    """Parse ``argv``, run the lab and return its rows, claims and settings (for notebooks and tests)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = build_parser().parse_args(argv)
    log.info("command: lightning-rlvr-credit-eval %s", shlex.join(sys.argv[1:] if argv is None else argv))
    try:
        return run(args)
    except Exception as err:
        exit_with_one_line("lightning-rlvr-credit-eval", user_error(err))
        raise


if __name__ == "__main__":
    raise SystemExit(main())
