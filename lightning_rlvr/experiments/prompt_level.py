"""Prompt-level statistics: two runs paired prompt by prompt, and a paired difference's noise split into
evaluation and training parts.

Layer: ``experiments`` (pure arithmetic over per-prompt rows, ``core/per_prompt.py``'s format).

One run's evaluation gives, per prompt i, the mean correctness a_i of its n samples. Two runs evaluated on
the same prompts (two methods on one seed; a checkpoint and the untouched model) pair by prompt id:
d_i = a_i - b_i, their difference D = mean_i d_i with the prompt-paired standard error sd_i(d_i) / sqrt(P),
and the correlation r of a_i and b_i (how much the two runs find the same prompts easy).

Over S seeds on the same P prompts, d_{s,i} = mu + u_s + v_i + w_{s,i} + e_{s,i}: u_s the seed's shift
(training), v_i the prompt's (the same in every seed, so it moves no seed's difference against another's),
w_{s,i} a seed's own luck on a prompt, and e_{s,i} the binomial noise of n samples. The per-seed
differences D_s then vary by Var(D_s) = s2_u + (s2_w + s2_e) / P. The two-way analysis of variance
without replication estimates it: its residual mean square MS_R (of d - seed mean - prompt mean + grand
mean, (S - 1)(P - 1) degrees of freedom) estimates s2_w + s2_e, so

    evaluation part  = MS_R / P                         (shrinks with more test prompts)
    training part    = max(0, Var(D_s) - MS_R / P)      (only more seeds shrink it)
    binomial part    = mean_{s,i}(v_a + v_b) / P, v = the sample variance of a prompt's n verdicts / n
                       (had the two runs sampled independently: evaluation shares ``eval_seed``, so two
                       runs whose policies agree draw alike and the real binomial share is smaller)

and a test set k times as large gives SD_k = sqrt(training + evaluation / k), and the MDD with the same
seeds at that SD. With one seed only the prompt-paired SE is known: it bounds the evaluation part from
above (it holds s2_v too) and the training part is unknown.

``python -m lightning_rlvr.experiments.prompt_level A B`` pairs two evaluations' per-prompt files (a
checkpoint's test against the untouched model's) and prints the prompt-paired difference in one line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import RLVRError, exit_with_one_line
from ..core.per_prompt import FOLDER, SUFFIX, file_name, read_results
from .stats import min_detectable_difference, t_quantile


@dataclass(frozen=True)
class PromptScore:
    """One run's result on one prompt: its mean correctness over ``n`` samples and the binomial variance
    of that mean (the sample variance of the verdicts / n; nan with one sample)."""

    mean: float
    n: int
    var: float


def prompt_scores(rows: Iterable[dict]) -> dict[str, PromptScore]:
    """Per-prompt rows ({prompt_id, sample, correct, ...}) as {prompt id: ``PromptScore``}."""
    verdicts: dict[str, list[float]] = {}
    for row in rows:
        verdicts.setdefault(str(row["prompt_id"]), []).append(float(bool(row["correct"])))
    out = {}
    for pid, v in verdicts.items():
        n, mean = len(v), sum(v) / len(v)
        var = sum((x - mean) ** 2 for x in v) / (n - 1) / n if n > 1 else math.nan
        out[pid] = PromptScore(mean, n, var)
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _var(values: Sequence[float]) -> float:
    m = _mean(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else math.nan


def correlation(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r of two equally long sequences (nan when either has no spread)."""
    mx, my = _mean(x), _mean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


@dataclass(frozen=True)
class PromptPair:
    """Run a minus run b on the prompts both evaluated."""

    prompts: int
    diff: float  # mean over prompts of a_i - b_i
    se: float  # prompt-paired standard error of ``diff``
    low: float  # its ``level`` t-interval
    high: float
    r: float  # correlation of a_i and b_i over the prompts
    agree: float  # share of prompts whose majority verdict (mean > 1/2) is the same in both runs
    binomial_var: float  # the binomial part of se**2: mean_i(var a_i + var b_i) / P


def pair_prompts(a: dict[str, PromptScore], b: dict[str, PromptScore], level: float = 0.95) -> PromptPair:
    """``a`` against ``b`` (``prompt_scores`` each) on their common prompt ids."""
    ids = [pid for pid in a if pid in b]
    x, y = [a[i].mean for i in ids], [b[i].mean for i in ids]
    d = [p - q for p, q in zip(x, y)]
    n = len(d)
    se = math.sqrt(_var(d) / n) if n > 1 else math.nan
    half = t_quantile(n - 1, 0.5 + level / 2) * se if n > 1 else math.nan
    agree = _mean([float((a[i].mean > 0.5) == (b[i].mean > 0.5)) for i in ids])
    binomial = _mean([a[i].var + b[i].var for i in ids]) / n if n else math.nan
    return PromptPair(n, _mean(d), se, _mean(d) - half, _mean(d) + half, correlation(x, y), agree, binomial)


@dataclass(frozen=True)
class Decomposition:
    """The noise in a paired difference over seeds, each part as a variance of the per-seed difference."""

    seeds: int
    prompts: int  # common to every seed
    sd: float  # observed SD of the per-seed differences D_s (nan for one seed)
    evaluation: float  # MS_R / P (one seed: the prompt-paired SE squared, an upper bound)
    binomial: float  # the binomial noise of n completions a prompt, had the runs sampled independently
    training: float  # max(0, Var(D_s) - evaluation) (nan for one seed)

    def sd_at(self, factor: float) -> float:
        """The SD of the per-seed difference with ``factor`` x the test prompts (the same seeds)."""
        return math.sqrt(self.training + self.evaluation / factor)

    def mdd_at(self, factor: float, power: float = 0.8, level: float = 0.95) -> float:
        """The paired t-test's MDD over these seeds with ``factor`` x the test prompts."""
        return min_detectable_difference(self.sd_at(factor), self.seeds, power, 1 - level)


def decompose(pairs: Sequence[tuple[dict[str, PromptScore], dict[str, PromptScore]]]) -> Decomposition:
    """Split the variance of a paired difference over seeds: ``pairs`` holds one (a, b) of
    ``prompt_scores`` per seed; only the prompts every seed evaluated in both runs count."""
    S = len(pairs)
    common = [pid for pid in pairs[0][0] if all(pid in a and pid in b for a, b in pairs)] if S else []
    P = len(common)
    if S == 0 or P < 2:
        return Decomposition(S, P, math.nan, math.nan, math.nan, math.nan)
    d = [[a[i].mean - b[i].mean for i in common] for a, b in pairs]  # [S][P]
    binomial = _mean([a[i].var + b[i].var for a, b in pairs for i in common]) / P
    seed_means = [_mean(row) for row in d]
    if S == 1:
        return Decomposition(1, P, math.nan, _var(d[0]) / P, binomial, math.nan)
    prompt_means = [_mean([d[s][i] for s in range(S)]) for i in range(P)]
    grand = _mean(seed_means)
    residual = sum(
        (d[s][i] - seed_means[s] - prompt_means[i] + grand) ** 2 for s in range(S) for i in range(P)
    )
    evaluation = residual / ((S - 1) * (P - 1)) / P
    observed = _var(seed_means)
    return Decomposition(S, P, math.sqrt(observed), evaluation, binomial, max(0.0, observed - evaluation))


# ---------------------------------------------------------------------------- two evaluations, from files
def _scores_of(where: str) -> dict[str, PromptScore]:
    """The per-prompt scores of a per-prompt file, or of the one test file under a folder (a run's)."""
    path = Path(where)
    if path.is_dir():
        found = sorted(path.rglob(f"{FOLDER}/{file_name('test')}"))
        if len(found) != 1:
            many = f"{len(found)} ({', '.join(str(p) for p in found[:3])})" if found else "none"
            raise RLVRError(f"{where}: a folder must hold one {FOLDER}/{file_name('test')}, found {many}")
        path = found[0]
    if not (path.is_file() and path.name.endswith(SUFFIX)):
        raise RLVRError(f"{where}: not a per-prompt results file (*{SUFFIX}) or a folder holding one")
    name = path.name[: -len(SUFFIX)].split(".rank")[0]
    return prompt_scores(read_results(path.parent, name))


def compare_text(a: str, b: str, level: float = 0.95) -> str:
    """Two evaluations of the same prompts (a trained checkpoint against the untouched model), in words."""
    x, y = _scores_of(a), _scores_of(b)
    p = pair_prompts(x, y, level)
    if p.prompts < 2:
        raise RLVRError(f"{a} and {b} share {p.prompts} prompt ids: they did not evaluate the same prompts")
    mean = {
        w: 100 * sum(s[i].mean for i in s if i in x and i in y) / p.prompts for w, s in (("a", x), ("b", y))
    }
    return (
        f"{p.prompts} prompts in both: pass@1 {mean['a']:.1f} vs {mean['b']:.1f}, difference "
        f"{100 * p.diff:+.1f} points [{100 * p.low:+.1f}, {100 * p.high:+.1f}] ({round(level * 100)}% "
        f"prompt-paired interval), per-prompt correlation r {p.r:.2f}, the same majority verdict on "
        f"{100 * p.agree:.0f}% of prompts\n"
    )


def main(argv: list[str] | None = None) -> None:
    """``python -m lightning_rlvr.experiments.prompt_level A B``: evaluation A against B, prompt by prompt."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="prompt_level", description=compare_text.__doc__)
    parser.add_argument("a", help="a per-prompt file (per_prompt/test.csv.gz) or a folder holding one")
    parser.add_argument("b", help="the one to compare it with (e.g. the untouched model's)")
    parser.add_argument("--level", type=float, default=0.95)
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(compare_text(args.a, args.b, args.level))
    except RLVRError as err:
        exit_with_one_line("prompt_level", err)


if __name__ == "__main__":
    main()
