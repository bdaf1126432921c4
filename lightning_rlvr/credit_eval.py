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
  distillation-style methods (``credit_view.method_credit``);
* the task, when it can (``Task.first_error``), says where each failed
  completion first goes wrong (a character offset, mapped here to the token
  that holds it; None when unknown).

Per method (``credit_metrics`` defines each): Spearman correlation with the
oracle per rollout; localisation share within +-d tokens of the first error
against the uniform share; sign agreement with the oracle; cost (tokens run
through the model, sampled ones included, and seconds of ``assign``, per
group), each with a group-bootstrap 95% interval. And two papers' claims on
the same rollouts: SHEAR's (its span distance to the opposite group is larger
after the first error than before) and HSD's (its distillation signal
concentrates at the first error), as the share of groups where each holds.

Writes credit_eval.csv, credit_eval.md (the table + claims) and credit_eval.png.
"""

from __future__ import annotations

import argparse
import csv
import logging
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from lightning_rlvr.core.rng import seeded
from lightning_rlvr.credit_metrics import (
    Summary,
    localisation,
    mean_before_after,
    sign_agreement,
    spearman,
    summarise,
)
from lightning_rlvr.credit_view import DEFAULT_METHODS, assign_all, load_module_and_methods
from lightning_rlvr.errors import RLVRError

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- first errors as tokens
def char_to_token(tokenizer, ids: list[int], offset: int) -> int | None:
    """Index of the token whose decoded text holds character ``offset`` of the decoded completion.

    An offset at the end of the text points at a final EOS (the completion stopped where it should
    have gone on); None when there is no such token (e.g. a completion cut by the budget).
    """
    prev = 0
    for t in range(len(ids)):
        n = len(tokenizer.decode(ids[: t + 1], skip_special_tokens=True))
        if n > offset:
            return t
        if n == prev and t == len(ids) - 1 and offset >= n:  # a final special token (EOS) adds no text
            return t
        prev = n
    return None


def first_error_tokens(task, rollout, tokenizer) -> list[int | None]:
    """Per row: the token of the first error of a failed completion, None for correct rows or unknown."""
    out: list[int | None] = []
    for i in range(rollout.num_rows):
        if bool(rollout.correct[i]):
            out.append(None)
            continue
        problem = rollout.problems[int(rollout.group[i])]
        offset = task.first_error(rollout.completions[i], problem)
        ids = rollout.completion_tokens(i).tolist()
        out.append(None if offset is None else char_to_token(tokenizer, ids, offset))
    return out


# ---------------------------------------------------------------------------- per-method records
@dataclass
class Records:
    """Per-rollout values of one method (None where undefined) with each value's group."""

    cls: str = ""
    spearman: list = field(default_factory=list)
    sign: list = field(default_factory=list)
    loc: list = field(default_factory=list)
    loc_uniform: list = field(default_factory=list)
    groups: list = field(default_factory=list)  # for spearman / sign (every rollout)
    loc_groups: list = field(default_factory=list)  # for localisation (failed rollouts with a known error)
    tokens: float = 0.0
    seconds: float = 0.0


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
        for i, L in enumerate(lengths):
            if L < 1:
                continue
            g = group_offset + int(rollout.group[i])
            w, o = v.advantages[i, :L], oracle[i, :L]
            rec.spearman.append(spearman(w, o))
            rec.sign.append(sign_agreement(w, o))
            rec.groups.append(g)
            if errors[i] is not None:
                share, uniform = localisation(w, errors[i], d)
                rec.loc.append(share)
                rec.loc_uniform.append(uniform)
                rec.loc_groups.append(g)


# ---------------------------------------------------------------------------- paper claims
@dataclass
class Claim:
    name: str
    statement: str
    per_group: dict[int, list[float]] = field(default_factory=dict)  # group -> per-rollout margins

    def add(self, group: int, margin: float) -> None:
        self.per_group.setdefault(group, []).append(margin)

    def summary(self) -> dict:
        groups = [sum(m) / len(m) > 0 for m in self.per_group.values()]
        rollouts = [x > 0 for m in self.per_group.values() for x in m]
        return {
            "claim": self.name,
            "groups": len(groups),
            "groups_holding": sum(groups),
            "frac_groups": sum(groups) / len(groups) if groups else None,
            "rollouts": len(rollouts),
            "frac_rollouts": sum(rollouts) / len(rollouts) if rollouts else None,
            "statement": self.statement,
        }


def record_claims(
    claims: dict[str, Claim], views, errors, rollout, grpo: Tensor, group_offset: int, d: int
) -> None:
    """SHEAR: mean token weight (span distance / mean hidden norm) after the first error minus before.
    SHEAR control: the same on the group's CORRECT rollouts, cut at the median first error of the
    group's failed ones (a rollout with no error: a margin there means position, not divergence).
    HSD: share of the distillation loss within +-d tokens of the first error minus the uniform share."""
    lengths = rollout.lengths.tolist()
    group_errors: dict[int, list[int]] = {}
    for i, e in enumerate(errors):
        if e is not None:
            group_errors.setdefault(int(rollout.group[i]), []).append(e)
    for v in views:
        for i, L in enumerate(lengths):
            e = errors[i]
            g = group_offset + int(rollout.group[i])
            mixed = abs(float(grpo[i])) > 0  # the opposite side exists
            if v.cls == "SHEARCredit" and mixed and e is None and bool(rollout.correct[i]):
                peers = sorted(group_errors.get(int(rollout.group[i]), []))
                split = mean_before_after(v.weights[i, :L], peers[len(peers) // 2]) if peers else None
                if split is not None:
                    claims["shear_control"].add(g, split[1] - split[0])
            if e is None:
                continue
            if v.cls == "SHEARCredit" and mixed:
                split = mean_before_after(v.weights[i, :L], e)
                if split is not None:
                    claims["shear"].add(g, split[1] - split[0])
            if v.token_loss is not None and v.cls == "HSDCredit":
                loss = v.token_loss[i, :L]
                if float(loss.abs().max()) > 0:  # the row was distilled
                    share, uniform = localisation(loss, e, d)
                    claims["hsd"].add(g, share - uniform)


# ---------------------------------------------------------------------------- outputs
def summaries(records: dict[str, Records], n_groups: int, n_boot: int, seed: int) -> list[dict]:
    rows = []
    for name, r in records.items():
        rows.append(
            {
                "method": name,
                "class": r.cls,
                "spearman": summarise(r.spearman, r.groups, n_boot, seed),
                "localisation": summarise(r.loc, r.loc_groups, n_boot, seed),
                "uniform": summarise(r.loc_uniform, r.loc_groups, n_boot, seed),
                "sign": summarise(r.sign, r.groups, n_boot, seed),
                "tokens_per_group": r.tokens / max(n_groups, 1),
                "seconds_per_group": r.seconds / max(n_groups, 1),
            }
        )
    return rows


def write_csv(path: Path, rows: list[dict]) -> None:
    fields = ["method", "class"]
    for key in ("spearman", "localisation", "uniform", "sign"):
        fields += [f"{key}_mean", f"{key}_low", f"{key}_high", f"{key}_n", f"{key}_total"]
    fields += ["tokens_per_group", "seconds_per_group", "notes"]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            out = {"method": row["method"], "class": row["class"]}
            notes = []
            for key in ("spearman", "localisation", "uniform", "sign"):
                s: Summary = row[key]
                fmt = lambda x: "" if x is None else f"{x:.6g}"
                out.update(
                    {
                        f"{key}_mean": fmt(s.mean),
                        f"{key}_low": fmt(s.low),
                        f"{key}_high": fmt(s.high),
                        f"{key}_n": s.n,
                        f"{key}_total": s.n_total,
                    }
                )
                if s.mean is None and s.n_total:
                    notes.append(f"{key} undefined on all {s.n_total} rollouts")
            out["tokens_per_group"] = f"{row['tokens_per_group']:.1f}"
            out["seconds_per_group"] = f"{row['seconds_per_group']:.4f}"
            out["notes"] = "; ".join(notes)
            writer.writerow(out)


def undefined_cell(s: Summary, what: str) -> str:
    return f"undefined ({what})" if s.n_total else "no rollouts"


def markdown(rows: list[dict], claims: list[dict], settings: dict, d: int) -> str:
    head = (
        f"| method | Spearman vs MC | localisation (+-{d} tok) | uniform share | sign agreement | "
        "tokens / group | s / group |\n|---|---|---|---|---|---:|---:|\n"
    )
    lines = []
    for r in rows:
        sp = r["spearman"]
        sp_cell = (
            sp.cell() + f" (n={sp.n}/{sp.n_total})"
            if sp.mean is not None
            else undefined_cell(sp, "constant credit in every rollout")
        )
        loc = r["localisation"]
        loc_cell = (
            loc.cell()
            if loc.mean is not None
            else undefined_cell(loc, "no failed rollout with a known error")
        )
        uni = r["uniform"].cell() if r["uniform"].mean is not None else "-"
        sign = r["sign"]
        sign_cell = sign.cell() if sign.mean is not None else undefined_cell(sign, "zero credit")
        lines.append(
            f"| {r['method']} | {sp_cell} | {loc_cell} | {uni} | {sign_cell} | "
            f"{r['tokens_per_group']:.0f} | {r['seconds_per_group']:.3f} |"
        )
    out = [head + "\n".join(lines), ""]
    out.append("Paper claims on the same rollouts (a group holds when its mean margin over its qualifying ")
    out.append("failed rollouts is > 0):\n")
    out.append(
        "| claim | groups | holds in | share of groups | share of rollouts |\n|---|---:|---:|---:|---:|"
    )
    for c in claims:
        fg = "-" if c["frac_groups"] is None else f"{c['frac_groups']:.2f}"
        fr = "-" if c["frac_rollouts"] is None else f"{c['frac_rollouts']:.2f}"
        out.append(
            f"| {c['claim']}: {c['statement']} | {c['groups']} | {c['groups_holding']} | {fg} | {fr} |"
        )
    out.append("")
    out.append("Settings: " + ", ".join(f"{k} = {v}" for k, v in settings.items()))
    return "\n".join(out) + "\n"


def plot(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["method"] for r in rows]
    panels = [
        ("spearman", "Spearman vs MC oracle"),
        ("localisation", "localisation share"),
        ("sign", "sign agreement"),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(4.2 * 4, 3.6 + 0.1 * len(names)))
    for ax, (key, title) in zip(axes, panels):
        for k, r in enumerate(rows):
            s: Summary = r[key]
            if s.mean is None:
                ax.text(0, k, " undefined", va="center", fontsize=8, color="#666")
                continue
            err = None if s.low is None else [[s.mean - s.low], [s.high - s.mean]]
            ax.barh(k, s.mean, xerr=err, color="#3b75af", capsize=3)
        if key == "localisation":
            uni = [r["uniform"].mean for r in rows if r["uniform"].mean is not None]
            if uni:
                ax.axvline(sum(uni) / len(uni), color="#c44", ls="--", label="uniform")
                ax.legend(fontsize=8)
        ax.axvline(0, color="k", lw=0.5)
        ax.set_title(title, fontsize=10)
        ax.set_yticks(range(len(names)), names if ax is axes[0] else [""] * len(names))
        ax.invert_yaxis()
    ax = axes[3]
    ax.barh(range(len(rows)), [r["tokens_per_group"] for r in rows], color="#888")
    ax.set_title("extra forward tokens / group", fontsize=10)
    ax.set_yticks(range(len(names)), [""] * len(names))
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
        "--oracle-samples", type=int, default=8, help="continuations per cut of the MC oracle (default 8)"
    )
    p.add_argument("--oracle-every", type=int, default=4, help="the MC oracle cuts every this many tokens")
    p.add_argument(
        "--window", type=int, default=2, help="d: localisation counts tokens within +-d of the error"
    )
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of groups")
    p.add_argument("--seed", type=int, default=0, help="sampling and bootstrap seed")
    p.add_argument("--out", default="credit_eval", help="output directory (default ./credit_eval)")
    return p


def run(args: argparse.Namespace) -> dict:
    from lightning_rlvr.continuations import EngineSampler
    from lightning_rlvr.credit.mc import MonteCarloCredit
    from lightning_rlvr.scoring import Scorer

    if args.prompts < 1 or args.batch_prompts < 1 or args.oracle_samples < 1 or args.oracle_every < 1:
        raise RLVRError("--prompts, --batch-prompts, --oracle-samples and --oracle-every must be >= 1")
    start = time.perf_counter()
    module, methods = load_module_and_methods(args.ckpt_path, args.methods)
    G = args.group_size or max(module.group_size, 2)
    if G < 2:
        raise RLVRError("--group-size must be >= 2: the lab compares rollouts within a group")
    oracle = MonteCarloCredit(
        num_samples=args.oracle_samples,
        segment="tokens",
        every=args.oracle_every,
        max_segments=64,
        scale_by_std=False,
    )
    records: dict[str, Records] = {}
    claims = {
        "shear": Claim(
            "SHEAR", "span distance to the opposite group larger after the first error than before"
        ),
        "shear_control": Claim(
            "SHEAR control",
            "the same on correct rollouts, cut at the median first error of their failed peers",
        ),
        "hsd": Claim(
            "HSD", "distillation signal concentrated within +-d tokens of the first error (vs uniform)"
        ),
    }
    problems = [module.task.problem(args.split, i) for i in range(args.prompts)]
    n_correct = n_rows = n_known = n_failed = 0
    oracle_tokens = 0
    starts = range(0, len(problems), args.batch_prompts)
    rollouts = {}  # every rollout first, each batch from its own seed: fixed by the seed alone
    for b in starts:
        with seeded(args.seed, "rollout", b), torch.no_grad():
            rollouts[b] = module.rollout(problems[b : b + args.batch_prompts], G)
            module.verify(rollouts[b])
    for b in starts:
        batch, rollout = problems[b : b + args.batch_prompts], rollouts[b]
        make = lambda r=rollout: Scorer(
            module.model, r, module.tokenizer, module.micro_batch_size, sampler=EngineSampler.of(module)
        )
        oracle_scorer = make()
        with seeded(args.seed, "oracle", b), torch.no_grad():
            truth = oracle.assign(rollout, oracle_scorer).advantages  # [N, T] raw MC segment advantages
        oracle_tokens += oracle_scorer.forward_tokens
        grpo, views = assign_all(methods, rollout, make, key=(args.seed, "method", b))
        errors = first_error_tokens(module.task, rollout, module.tokenizer)
        record_batch(records, views, truth, errors, rollout, b, args.window)
        record_claims(claims, views, errors, rollout, grpo, b, args.window)
        n_rows += rollout.num_rows
        n_correct += int(rollout.correct.sum())
        n_failed += int((~rollout.correct).sum())
        n_known += sum(e is not None for e in errors)
        log.info(
            "credit-eval: %d / %d prompts (%.0f s)",
            b + len(batch),
            len(problems),
            time.perf_counter() - start,
        )
    rows = summaries(records, len(problems), args.bootstrap, args.seed)
    claim_rows = [c.summary() for c in claims.values()]
    settings = {
        "checkpoint": args.ckpt_path,
        "split": args.split,
        "prompts P": len(problems),
        "group size G": G,
        "rollouts": n_rows,
        "correct": n_correct,
        "failed with a known first error": f"{n_known} of {n_failed}",
        "MC oracle": f"M = {args.oracle_samples} continuations every {args.oracle_every} tokens (raw)",
        "oracle tokens / group": f"{oracle_tokens / len(problems):.0f}",
        "d": args.window,
        "bootstrap": f"{args.bootstrap} group resamples",
        "seed": args.seed,
        "wall time": f"{time.perf_counter() - start:.0f} s",
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "credit_eval.csv", rows)
    with (out / "credit_claims.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(claim_rows[0]))
        writer.writeheader()
        writer.writerows(claim_rows)
    (out / "credit_eval.md").write_text(markdown(rows, claim_rows, settings, args.window))
    plot(out / "credit_eval.png", rows)
    log.info("wrote %s/credit_eval.{csv,md,png} in %s", out, settings["wall time"])
    return {"rows": rows, "claims": claim_rows, "settings": settings, "out": out}


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
    except RLVRError as err:
        sys.stderr.write(f"lightning-rlvr-credit-eval: error: {err}\n")
        raise SystemExit(2) from None


if __name__ == "__main__":
    raise SystemExit(main())
