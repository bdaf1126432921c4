"""Prompt-level pairing and the evaluation/training split of a paired difference, on tables a reader can
check by hand, and the sweep report and archive that carry them."""

from __future__ import annotations

import math
import random
import shutil
from pathlib import Path

import pytest

from lightning_rlvr.core.per_prompt import file_name, prompt_id, write_results
from lightning_rlvr.experiments.prompt_level import PromptScore, decompose, pair_prompts, prompt_scores
from lightning_rlvr.experiments.stats import min_detectable_difference
from lightning_rlvr.experiments.sweep import run as sw
from tests.conftest import write
from tests.test_sweep_lifecycle import FakeLightning


def _rows(verdicts: dict[str, list[int]]) -> list[dict]:
    return [
        {"prompt_id": pid, "sample": j, "reward": float(v), "correct": bool(v)}
        for pid, vs in verdicts.items()
        for j, v in enumerate(vs)
    ]


def _scores(means: list[float]) -> dict[str, PromptScore]:
    return {f"test:{i}:x": PromptScore(m, 1, math.nan) for i, m in enumerate(means)}


def test_two_runs_pair_prompt_by_prompt():
    # prompt 1: both right; 2: only a; 3, 4: both wrong; 5 only in a (not paired)
    a = prompt_scores(_rows({"p1": [1], "p2": [1], "p3": [0], "p4": [0], "p5": [1]}))
    b = prompt_scores(_rows({"p1": [1], "p2": [0], "p3": [0], "p4": [0]}))
    p = pair_prompts(a, b)
    assert p.prompts == 4
    assert p.diff == pytest.approx(0.25)  # one prompt of four
    assert p.se == pytest.approx(0.25)  # d = (0, 1, 0, 0): sd 0.5, / sqrt(4)
    assert p.r == pytest.approx(0.5 / math.sqrt(0.75))  # Pearson of (1,1,0,0) and (1,0,0,0)
    assert p.agree == pytest.approx(0.75)
    assert p.low < 0 < p.high  # one prompt of four is within evaluation noise
    # identical runs: no difference, perfect correlation, full agreement
    same = pair_prompts(a, a)
    assert (same.diff, same.se, same.r, same.agree) == (0.0, 0.0, pytest.approx(1.0), 1.0)


def test_prompt_scores_average_samples_with_their_binomial_variance():
    s = prompt_scores(_rows({"p": [1, 0, 1, 1]}))["p"]
    assert (s.mean, s.n) == (0.75, 4)
    assert s.var == pytest.approx((3 * 0.0625 + 0.5625) / 3 / 4)  # sample variance of the verdicts / n


def test_a_seed_shift_is_training_and_a_seed_by_prompt_residual_is_evaluation():
    # d[s][i] = u_s + v_i exactly: every seed moves all prompts alike, nothing is left for evaluation
    u, v = [0.1, -0.1, 0.0], [0.0, 0.2, -0.2, 0.1]
    pairs = [(_scores([0.5 + us + vi for vi in v]), _scores([0.5] * 4)) for us in u]
    dec = decompose(pairs)
    assert (dec.seeds, dec.prompts) == (3, 4)
    assert dec.evaluation == pytest.approx(0.0, abs=1e-12)
    assert dec.training == pytest.approx(0.01)  # var(0.1, -0.1, 0) = 0.01
    assert dec.sd == pytest.approx(0.1)
    assert dec.sd_at(4) == pytest.approx(0.1)  # more prompts buy nothing
    # d = [[+x, -x], [-x, +x]]: seed and prompt means 0, each residual x^2 over 1 df, / P = 2: 2 x^2 / 2
    x = 0.1
    pairs = [
        (_scores([0.5 + x, 0.5 - x]), _scores([0.5, 0.5])),
        (_scores([0.5 - x, 0.5 + x]), _scores([0.5] * 2)),
    ]
    dec = decompose(pairs)
    assert dec.evaluation == pytest.approx(2 * x**2)
    assert dec.training == 0.0  # the seeds' differences agree exactly: nothing left for training
    assert dec.sd_at(2) == pytest.approx(x)  # twice the prompts: half the evaluation variance
    assert dec.sd_at(1) == pytest.approx(x * math.sqrt(2))  # the parts' SD, not the observed 0
    assert dec.mdd_at(2) == pytest.approx(min_detectable_difference(x, 2))


def test_one_seed_gives_the_prompt_paired_se_and_no_training_part():
    dec = decompose([(_scores([1, 1, 0, 0]), _scores([1, 0, 0, 0]))])
    assert dec.evaluation == pytest.approx(0.25**2)  # the prompt-paired SE squared
    assert math.isnan(dec.training) and math.isnan(dec.sd)


def test_the_split_recovers_planted_parts():
    """20 seeds x 400 prompts x 4 samples: a seed shift of SD 0.03 (training) on binomial noise alone."""
    rng = random.Random(0)
    p = [rng.uniform(0.2, 0.8) for _ in range(400)]
    pairs = []
    for _ in range(20):
        shift = rng.gauss(0, 0.03)

        def run(bias: float) -> dict[str, list[int]]:
            return {
                f"test:{i}:x": [int(rng.random() < pi + bias) for _ in range(4)] for i, pi in enumerate(p)
            }

        pairs.append((prompt_scores(_rows(run(shift))), prompt_scores(_rows(run(0.0)))))
    dec = decompose(pairs)
    binomial = 2 * sum(pi * (1 - pi) for pi in p) / len(p) / 4 / 400  # two runs' binomial variance / P
    assert dec.evaluation == pytest.approx(binomial, rel=0.15)
    assert dec.binomial == pytest.approx(binomial, rel=0.15)  # no seed-by-prompt luck planted
    assert math.sqrt(dec.training) == pytest.approx(0.03, rel=0.4)
    assert dec.sd_at(4) < dec.sd_at(2) < dec.sd


class PerPromptLightning(FakeLightning):
    """The fake CLI, its test also writing per-prompt results (one sample a prompt): method ``one`` solves
    prompt 1 of four; ``two`` solves prompts 0 and 1 on seed 0, and prompt 2 too on seed 1."""

    def __call__(self, argv: list[str], log_path: Path, env: dict[str, str]) -> int:
        code = super().__call__(argv, log_path, env)
        run = log_path.parent
        if argv[0] == "test" and run.name != "_warmup":
            ids = [prompt_id("test", i, f"q{i}") for i in range(4)]
            solved = {"one": {1}, "two": {0, 1} | ({2} if run.name.endswith("seed=1") else set())}
            right = {ids[i] for i in solved[run.name.split("__")[0]]}
            rows = [
                {"prompt_id": i, "sample": 0, "reward": float(i in right), "correct": i in right} for i in ids
            ]
            write_results(run / "logs" / "test" / "per_prompt" / file_name("test"), rows)
        return code


def test_the_sweep_report_pairs_prompts_and_the_archive_keeps_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "m" / "one.yaml", "model: {lr: 1.0e-4}\n")
    write(tmp_path / "m" / "two.yaml", "model: {lr: 2.0e-4}\n")
    text = (
        "out: out\nreport_dir: report\ngrid:\n  config: [m/one.yaml, m/two.yaml]\n  seed_everything: [0, 1]\n"
    )
    path = write(tmp_path / "s.yaml", text)
    assert sw.main([str(path), "--jobs", "1"], runner=PerPromptLightning()) == 0
    kept = tmp_path / "report" / "runs" / "two__seed=1" / "logs" / "test" / "per_prompt" / "test.csv.gz"
    assert kept.is_file()
    report = (tmp_path / "report" / "results.md").read_text()
    section = report[report.index("## Prompt by prompt") :]
    # seed 0: d = (1, 0, 0, 0): +25 points, r = corr((1,1,0,0), (0,1,0,0)), 3 of 4 prompts agree;
    # seed 1: d = (1, 0, 1, 0): +50, r = corr((1,1,1,0), (0,1,0,0)), 2 of 4 agree
    assert "| two | 0 | 4 | +25.0 [" in section and f"| {0.5 / math.sqrt(0.75):.2f} | 75% |" in section
    assert (
        "| two | 1 | 4 | +50.0 [" in section and f"| {0.25 / math.sqrt(0.75 * 0.75):.2f} | 50% |" in section
    )
    # D = (0.25, 0.5): SD 17.7 points, all of it the seed-by-prompt residual (MS_R 0.125 / 4 prompts =
    # 0.03125 = the observed variance): training 0; 2x and 4x the prompts: sqrt(0.03125 / k)
    assert "| two | 2 | 4 | 17.7 | 17.7 | - | 0.0 | 12.5 / 8.8 |" in section
    shutil.rmtree(tmp_path / "out")  # a fresh clone: the archive alone rewrites the same section
    assert sw.main([str(path), "--report-only"], runner=PerPromptLightning()) == 0
    after = (tmp_path / "report" / "results.md").read_text()
    assert after[after.index("## Prompt by prompt") :] == section
