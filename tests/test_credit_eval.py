"""The credit lab: its metrics on planted credit, degenerate inputs, first errors, the end-to-end table."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
import yaml

from lightning_rlvr.experiments.credit_lab import evaluate as ce
from lightning_rlvr.experiments.credit_lab.first_error import char_to_token
from lightning_rlvr.experiments.credit_lab.metrics import (
    Summary,
    coverage,
    is_constant,
    localisation,
    mean_before_after,
    sign_agreement,
    spearman,
    spearman_or_zero,
    summarise,
)
from lightning_rlvr.experiments.credit_lab.report import markdown
from lightning_rlvr.experiments.sweep.commands import _merged_config
from lightning_rlvr.experiments.sweep.spec import Run
from lightning_rlvr.tasks.addition import AdditionTask
from tests.conftest import BASE_TEST_SCALE, METHOD_TEST_SCALE, REPO


# ---------------------------------------------------------------------------- metrics by hand
def test_spearman_by_hand_with_and_without_ties():
    # d = [0, 1, 1, 0]: 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman(torch.tensor([1.0, 2, 3, 4]), torch.tensor([10.0, 30, 20, 40])) == pytest.approx(0.8)
    # ties get average ranks: [1.5, 1.5, 3] vs [1, 2, 3] -> 1.5 / sqrt(1.5 * 2)
    assert spearman(torch.tensor([5.0, 5, 7]), torch.tensor([0.1, 0.2, 0.3])) == pytest.approx(
        1.5 / math.sqrt(3.0)
    )
    assert spearman(torch.tensor([3.0, 2, 1]), torch.tensor([1.0, 2, 3])) == pytest.approx(-1.0)


@pytest.mark.parametrize("w", [[0.7] * 5, [0.0] * 5, [-2.0] * 3, [1.0], [1e8, 1e8 * (1 + 1e-9)]])
def test_constant_credit_has_undefined_correlation_and_scores_the_uniform_share(w):
    w = torch.tensor(w, dtype=torch.float64)
    o = torch.arange(len(w), dtype=torch.float64)
    assert is_constant(w)
    assert spearman(w, o) is None and spearman(o, w) is None
    share, uniform = localisation(w, 0, 1)
    assert share == uniform == min(2, len(w)) / len(w)


@pytest.mark.parametrize("L,e,d", [(20, 7, 2), (10, 0, 1), (33, 32, 3), (12, 5, 0)])
def test_planted_divergence_localisation_near_one_for_peaked_credit_uniform_for_grpo(L, e, d):
    lo, hi = max(0, e - d), min(L, e + d + 1)
    uniform = (hi - lo) / L
    peaked = torch.full((L,), -1.0)
    peaked[e] = -5.0  # all the credit beyond the common level at the error
    assert localisation(peaked, e, d) == pytest.approx((1.0, uniform))
    grpo = torch.full((L,), -0.8)
    assert localisation(grpo, e, d) == pytest.approx((uniform, uniform))
    noisy = peaked + 0.01 * torch.rand(L, generator=torch.Generator().manual_seed(L))
    assert localisation(noisy, e, d)[0] > 0.9
    elsewhere = (e + d + 3) % L
    if abs(elsewhere - e) > d + 1:  # credit planted away from the error gets ~nothing
        assert localisation(peaked, elsewhere, d)[0] == 0.0


def test_deviation_is_measured_from_the_median_so_a_single_peak_is_not_halved():
    w = torch.zeros(200)
    w[100] = 1.0
    # from the mean the peak would hold only half the deviation (the mean shift spreads the other half)
    dev_mean = (w - w.mean()).abs()
    assert float(dev_mean[100] / dev_mean.sum()) == pytest.approx(0.5)
    assert localisation(w, 100, 2)[0] == 1.0
    assert localisation(w, 10, 2)[0] == 0.0
    two = torch.zeros(10)
    two[[2, 7]] = 3.0
    assert localisation(two, 2, 1)[0] == pytest.approx(0.5)  # two equal peaks: half each


@pytest.mark.parametrize("scale", [0.01, 3.0, 1e4])
def test_metrics_are_invariant_to_rescaling_a_methods_credit(scale):
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        w = torch.randn(17, generator=gen, dtype=torch.float64)
        o = torch.randn(17, generator=gen, dtype=torch.float64)
        assert spearman(scale * w, o) == pytest.approx(spearman(w, o), abs=1e-12)
        assert sign_agreement(scale * w, o) == sign_agreement(w, o)
        for s in (scale, -scale):  # localisation only sees |deviation|
            assert localisation(s * w, 5, 2) == pytest.approx(localisation(w, 5, 2), abs=1e-12)
    assert sign_agreement(-w, o) == pytest.approx(1 - sign_agreement(w, o))


def test_sign_agreement_counts_zero_credit_as_no_agreement_and_reports_coverage():
    w = torch.tensor([1.0, -1.0, 0.0, 2.0, -3.0])
    o = torch.tensor([0.5, 0.5, 1.0, 0.0, -1.0])
    # the oracle signs tokens 0, 1, 2, 4; the credit agrees on 0 and 4, is zero on 2
    assert sign_agreement(w, o) == pytest.approx(2 / 4)
    assert coverage(w, o) == pytest.approx(3 / 4)
    assert sign_agreement(torch.zeros(4), o[:4]) == 0.0 and coverage(torch.zeros(4), o[:4]) == 0.0
    assert sign_agreement(w, torch.zeros(5)) is None and coverage(w, torch.zeros(5)) is None
    assert mean_before_after(torch.tensor([1.0, 1.0, 3.0, 5.0]), 2) == (1.0, 4.0)
    assert mean_before_after(torch.tensor([1.0, 2.0]), 0) is None


@pytest.mark.parametrize("keep", [0.1, 0.2, 0.5])
def test_a_method_that_zeroes_most_tokens_cannot_outrank_one_that_signs_them_all(keep):
    """Top-entropy keeps ~20% of tokens: scored on its own subset it read 'best sign agreement'."""
    gen = torch.Generator().manual_seed(3)
    o = torch.randn(200, generator=gen, dtype=torch.float64)
    full = torch.where(torch.rand(200, generator=gen) < 0.7, o.sign(), -o.sign())  # 70% right everywhere
    sparse = torch.zeros(200, dtype=torch.float64)
    kept = torch.rand(200, generator=gen) < keep
    sparse[kept] = o.sign()[kept]  # 100% right where it is non-zero
    assert sign_agreement(sparse, o) < sign_agreement(full, o)
    assert coverage(sparse, o) == pytest.approx(float(kept.double().mean()))
    assert spearman_or_zero(torch.ones(200), o) == 0.0 and spearman_or_zero(o, torch.ones(200)) is None


def test_summary_bootstraps_groups_and_never_prints_nan():
    values = [0.1, 0.3, None, 0.5, 0.7, 0.2, 0.4]
    groups = [0, 0, 1, 1, 2, 3, 3]
    s = summarise(values, groups, n_boot=500, seed=0)
    assert s.mean == pytest.approx(sum(v for v in values if v is not None) / 6)
    assert s.n == 6 and s.n_total == 7
    assert s.low <= s.mean <= s.high and s.low < s.high
    assert summarise([None, None], [0, 1]).cell() == "undefined"
    assert summarise([0.25], [0]).cell() == "0.25"  # one group: no interval
    assert summarise([float("nan"), 0.5], [0, 1]).n == 1
    assert "nan" not in Summary(None, None, None, 0, 0).cell().lower()


# ---------------------------------------------------------------------------- first errors
@pytest.mark.parametrize(
    "completion,expected",
    [
        (" 7+5+0=12;4+8+1=13;3+2+1=06; answer:632", None),  # correct
        (" 7+5+0=12;4+8+0=12;3+2+1=06; answer:622", 14),  # a dropped carry: the '0' of '4+8+0'
        (" 7+5+0=11;4+8+1=13;3+2+1=06; answer:632x", None),  # right answer, wrong step: correct is correct
        (" 7+5+0=11;4+8+0=12;3+2+0=05; answer:521", 8),  # the wrong partial sum '11'
        (" 7+5+0=12;4+8+1=13;", 19),  # stopped early: the error is the end (its EOS)
        ("", 0),
        (" answer:631", 1),
    ],
)
def test_addition_first_error_is_the_first_departure_from_the_forced_chain(completion, expected):
    task = AdditionTask(digits=3)
    problem = task.problem("test", 0)
    problem.meta, problem.answer = {"a": 347, "b": 285}, "632"
    assert task.first_error(completion, problem) == expected


def test_first_error_of_a_generic_task_is_unknown():
    from lightning_rlvr.core.problem import Problem
    from lightning_rlvr.tasks.base import Task

    assert Task().first_error("anything", Problem("p", "1")) is None


def test_character_offsets_map_to_the_token_that_holds_them():
    from lightning_rlvr.models import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    ids = tok(" 7+5+0=11;", add_special_tokens=False)["input_ids"]
    assert char_to_token(tok, ids, 8) == 8  # one character a token
    with_eos = ids + [tok.eos_token_id]
    assert char_to_token(tok, with_eos, len(" 7+5+0=11;")) == len(ids)  # the end is the EOS
    assert char_to_token(tok, ids, len(" 7+5+0=11;")) is None  # cut by the budget: no token


# ---------------------------------------------------------------------------- end to end (conftest.tiny_ckpt)


def method_files_at_test_scale(tmp_path: Path) -> list[str]:
    """Every method YAML; OPD's with the test-scale teacher that tests/configs/tiny_opd.yaml sets."""
    files = []
    for path in sorted((REPO / "configs" / "method").glob("*.yaml")):
        if path.stem == "opd":
            (scale,) = METHOD_TEST_SCALE["opd"]
            cfg = _merged_config(Run("opd", (str(path), scale), (), (), None))  # as --config composes them
            path = tmp_path / "opd.yaml"
            path.write_text(yaml.safe_dump(cfg))
        files.append(str(path))
    return files


def test_credit_eval_runs_every_method_on_the_same_rollouts_and_writes_the_table(tiny_ckpt, tmp_path):
    methods = method_files_at_test_scale(tmp_path)
    out = ce.evaluate(
        ["--ckpt_path", str(tiny_ckpt), "--methods", *methods, "--prompts", "3", "--batch-prompts", "2"]
        + ["--group-size", "3", "--oracle-samples", "2", "--oracle-every", "4", "--bootstrap", "50"]
        + ["--out", str(tmp_path / "lab")]
    )
    lab = tmp_path / "lab"
    rows = list(csv.DictReader((lab / "credit_eval.csv").open()))
    assert [r["method"] for r in rows] == [Path(m).stem for m in methods]
    assert all(int(r["spearman_total"]) > 0 for r in rows)  # every method saw the same rollouts
    assert len({r["spearman_total"] for r in rows}) == 1
    grpo = next(r for r in rows if r["method"] == "grpo")
    assert float(grpo["spearman_mean"]) == 0.0 and float(grpo["ranked_mean"]) == 0.0  # no ranking: 0
    assert "constant credit in every rollout" in grpo["notes"]
    assert len({r["spearman_n"] for r in rows}) == 1 and len({r["sign_n"] for r in rows}) == 1  # same sets
    table = (lab / "credit_eval.md").read_text()
    assert "nan" not in table.lower()
    assert "oracle reliability" in table and "outcome-sign baseline" in table
    assert "SHEAR" in table and "HSD" in table
    assert (lab / "credit_eval.png").stat().st_size > 0
    assert float(next(r for r in rows if r["method"] == "mc")["tokens_per_group"]) > float(
        grpo["tokens_per_group"]
    )  # MC samples continuations; GRPO runs nothing
    assert out["settings"]["group size G"] == 3
    own = list(csv.DictReader((lab / "credit_method_metrics.csv").open()))  # each method's Credit.metrics
    rred = {r["metric"]: float(r["mean_over_batches"]) for r in own if r["method"] == "rredcot"}
    assert 1.0 <= rred["segments_mean"] <= rred["segments_max"] and 0.0 <= rred["multi_segment_frac"] <= 1.0
    assert not [r for r in own if r["method"] == "grpo" and r["metric"] == "segments_mean"]
    assert "* rredcot: " in table and "multi_segment_frac" in table


def test_the_fast_engine_samples_the_labs_rollouts_and_oracle_as_the_checkpoints_engine_does(
    tiny_ckpt, tmp_path
):
    """``--engine fast`` only changes the speed: the same rollouts and continuations, so the same rows."""
    methods = [str(REPO / "configs/method/grpo.yaml"), str(REPO / "configs/method/mc.yaml")]
    args = ["--ckpt_path", str(tiny_ckpt), "--methods", *methods, "--prompts", "2", "--group-size", "3"]
    args += ["--oracle-samples", "2", "--bootstrap", "20"]
    rows, engines = {}, {}
    for engine in ("hf", "fast"):
        out = ce.evaluate([*args, "--engine", engine, "--out", str(tmp_path / engine)])
        engines[engine] = out["settings"]["engine"]
        with open(tmp_path / engine / "credit_eval.csv") as f:
            rows[engine] = [{k: v for k, v in r.items() if "seconds" not in k} for r in csv.DictReader(f)]
    assert engines == {"hf": "HFGenerateEngine", "fast": "FastEngine"}
    assert rows["hf"] == rows["fast"] and rows["hf"]


def test_the_lab_says_how_far_it_is_in_a_log_file(tiny_ckpt, tmp_path, capsys, caplog):
    """Output that is not a terminal gets plain progress lines: batches of prompts (equal costs, so the time
    left holds), and within a batch each oracle half and each method (unequal costs: no time left)."""
    methods = [str(REPO / "configs/method/grpo.yaml"), str(REPO / "configs/method/mc.yaml")]
    args = ["--ckpt_path", str(tiny_ckpt), "--methods", *methods, "--prompts", "2", "--batch-prompts", "1"]
    args += ["--group-size", "2", "--oracle-samples", "2", "--bootstrap", "10"]
    caplog.set_level("INFO")
    ce.evaluate([*args, "--out", str(tmp_path)])
    err = capsys.readouterr().err.splitlines()
    assert "lightning-rlvr: credit lab: started, 2 batches of 1 prompts" in err
    done = [line for line in err if line.startswith("lightning-rlvr: credit lab: 2/2 batches")]
    assert len(done) == 1 and done[0].endswith("(done)")
    counted = [r.getMessage() for r in caplog.records if "/ 2" in r.getMessage() or "2/2" in r.getMessage()]
    assert counted == []  # the progress line is the one count: no log line repeats it per batch


def test_the_lab_runs_on_textworld_episodes_and_finds_their_first_errors(run_cli, tmp_path):
    """An agent checkpoint (test-scale TextWorld cooking, turns enough for the walkthrough to win) goes
    through the same lab: episodes sampled, the oracle continued through the game, the same table, and
    each failed episode's first fatal action located from the walkthrough."""
    configs = (str(REPO / "configs/quickstart_agent.yaml"), *BASE_TEST_SCALE["quickstart_agent"])
    fit = run_cli("fit", "--model.task.init_args.max_turns", "8", "--trainer.max_steps", "1", configs=configs)
    ckpt = fit.trainer.checkpoint_callback.last_model_path
    methods = [str(REPO / f"configs/method/{m}.yaml") for m in ("grpo", "ktae", "mc")]
    args = ["--ckpt_path", ckpt, "--methods", *methods, "--split", "train", "--prompts", "1"]
    out = ce.evaluate(
        [*args, "--group-size", "4", "--oracle-samples", "2", "--bootstrap", "10", "--out", str(tmp_path)]
    )
    known, failed = (int(x) for x in out["settings"]["failed with a known first error"].split(" of "))
    assert failed > 0 and known == failed  # every lost episode has a fatal action the walkthrough shows
    rows = {r["method"]: r for r in csv.DictReader((tmp_path / "credit_eval.csv").open())}
    assert set(rows) == {"grpo", "ktae", "mc"}
    assert all(int(r["localisation_n"]) == known for r in rows.values())  # measured on every one of them


def test_credit_eval_rejects_a_group_of_one(tiny_ckpt, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        ce.main(
            ["--ckpt_path", str(tiny_ckpt), "--methods", str(REPO / "configs/method/grpo.yaml")]
            + ["--group-size", "1", "--out", str(tmp_path)]
        )
    assert exit_info.value.code == 2
    assert "group-size" in capsys.readouterr().err


def test_a_distillation_loss_counts_as_negative_credit_at_the_rollout_time_policy():
    from lightning_rlvr.credit.base import Credit
    from lightning_rlvr.experiments.credit_lab.view import method_credit
    from tests.rollouts import rollout_from_ids

    rollout = rollout_from_ids(
        [[5, 6]], [[1, 2, 3, 9], [1, 9]], pad=0, eos=9, group_size=2, rewards=[1.0, 0.0]
    )
    V = 10
    logits_seen = []

    class FixedScorer:
        def policy_logprobs(self, rows):
            return torch.log_softmax(torch.arange(V, dtype=torch.float).expand(len(rows), 4, V), -1)

    def token_loss(logits, rows):  # the loss sees the rollout-time log-probs, one row each
        logits_seen.append(logits)
        return torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]])[rows]

    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, 0.0, 0.0]])
    credit, loss = method_credit(Credit(adv, token_loss=token_loss), rollout, FixedScorer())
    mask = rollout.completion_mask.float()
    expected_loss = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.0, 0.0]])
    assert torch.allclose(loss, expected_loss * mask)
    assert torch.allclose(credit, (adv - expected_loss) * mask)
    assert logits_seen[0].shape == (2, 4, V)
    plain, none = method_credit(Credit(adv), rollout, FixedScorer())
    assert none is None and torch.equal(plain, adv * mask)


def test_degenerate_groups_are_recorded_as_undefined_not_nan():
    """An all-equal group (GRPO credit 0 everywhere), a rollout without a known error, an empty one."""
    from types import SimpleNamespace

    from tests.rollouts import rollout_from_ids

    rollout = rollout_from_ids(
        [[5, 6]], [[1, 2, 3, 9], [1, 9], []], pad=0, eos=9, group_size=3, rewards=[0.0, 0.0, 0.0]
    )
    T = rollout.completion_ids.shape[1]
    zero = SimpleNamespace(
        name="grpo",
        cls="GRPOCredit",
        advantages=torch.zeros(3, T),
        forward_tokens=0,
        seconds=0.0,
        metrics={"frac_defined": 0.5, "undefined_here": float("nan")},  # a method's own metrics
    )
    oracle = torch.tensor([[0.0, -0.5, 0.0, 0.0], [0.2, 0.2, 0.0, 0.0], [0.0] * 4])
    records: dict = {}
    ce.record_batch(records, [zero], oracle, [2, None, None], rollout, group_offset=0, d=1)
    r = records["grpo"]
    assert r.spearman == [0.0, None] and r.ranked == [0.0, None]  # row 1's oracle is constant
    assert r.sign == [0.0, 0.0] and r.coverage == [0.0, 0.0]  # zero credit: no agreement
    assert r.loc == [pytest.approx(3 / 4)] and r.loc_uniform == [pytest.approx(3 / 4)]  # row 0's error
    rows = ce.summaries(records, n_groups=1, n_boot=10, seed=0)
    table = markdown(rows, [], {"x": 1}, {"ceiling": "undefined"}, d=1)
    assert "nan" not in table.lower() and "| grpo | 0.00 | undefined | 0% |" in table
    assert "* grpo: frac_defined 0.5, undefined_here undefined" in table  # a NaN metric is not averaged


def test_every_console_script_exits_0_after_a_good_run(tiny_ckpt, tmp_path):
    """The wrapper pip writes runs ``sys.exit(main())``: a main that returns data (credit-eval returned
    its results dict) prints it and exits 1 after a good run, so scripts chaining it saw a failure."""
    import re
    import subprocess
    import sys

    section = (REPO / "pyproject.toml").read_text().split("[project.scripts]")[1].split("\n[")[0]
    scripts = dict(re.findall(r'^([\w-]+) = "([\w.:]+)"', section, re.M))  # (tomllib needs Python 3.11)
    assert "lightning-rlvr-credit-eval" in scripts and "lightning-rlvr" in scripts
    wrapper = "import sys; from {mod} import {fn}; sys.exit({fn}(sys.argv[1:]))"
    mod, fn = scripts["lightning-rlvr-credit-eval"].split(":")
    args = [
        "--ckpt_path",
        str(tiny_ckpt),
        "--methods",
        str(REPO / "configs/method/grpo.yaml"),
        "--prompts",
        "2",
    ]
    args += [
        "--group-size",
        "2",
        "--oracle-samples",
        "1",
        "--bootstrap",
        "10",
        "--out",
        str(tmp_path / "lab"),
    ]
    done = subprocess.run(
        [sys.executable, "-c", wrapper.format(mod=mod, fn=fn), *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "{'rows'" not in done.stderr and (tmp_path / "lab" / "credit_eval.csv").is_file()
    for name, target in scripts.items():  # the others: a main that returns an exit status or None
        mod, fn = target.split(":")
        hints = __import__(mod, fromlist=[fn]).__dict__[fn].__annotations__.get("return")
        assert hints in ("int", "None", int, None), f"{name}: {target} returns {hints}"


@pytest.mark.parametrize("damage", ["missing", "empty", "text"])
def test_credit_eval_on_a_missing_or_damaged_checkpoint_says_so_in_one_line(tmp_path, capsys, damage):
    ckpt = tmp_path / "last.ckpt"
    if damage != "missing":
        ckpt.write_text("" if damage == "empty" else "not a checkpoint")
    with pytest.raises(SystemExit) as exit_info:
        ce.main(
            [
                "--ckpt_path",
                str(ckpt),
                "--methods",
                str(REPO / "configs/method/grpo.yaml"),
                "--out",
                str(tmp_path),
            ]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1
    assert err[0].startswith("lightning-rlvr-credit-eval: error: --ckpt_path") and str(ckpt) in err[0]


# ---------------------------------------------------------------------------- independence of the method list
def _lab_rows(ckpt, tmp_path, methods: list[str], tag: str) -> dict[str, dict]:
    files = [str(REPO / "configs" / "method" / f"{m}.yaml") for m in methods]
    out = ce.evaluate(
        ["--ckpt_path", str(ckpt), "--methods", *files, "--prompts", "4", "--batch-prompts", "2"]
        + ["--group-size", "3", "--oracle-samples", "2", "--oracle-every", "3", "--bootstrap", "50"]
        + ["--out", str(tmp_path / tag)]
    )
    drop = ("seconds_per_group",)  # wall time is the one column allowed to differ
    return {r["method"]: {k: v for k, v in r.items() if k not in drop} for r in out["rows"]}


def test_a_methods_row_is_the_same_alone_or_beside_any_other_methods(tiny_ckpt, tmp_path):
    """Every rollout, oracle draw and method draw is fixed by the seed alone: later batches used to be
    sampled after earlier batches' methods had drawn from the global stream, so a method's row (and
    KTAE's count of scored rollouts) moved with the method list."""
    import random

    pool = ["mc", "sc_grpo", "ktae", "shear", "top_entropy", "hsd", "grpo"]
    both = _lab_rows(tiny_ckpt, tmp_path, pool, "all")
    pick = random.Random(30)
    for k, name in enumerate(["mc", "sc_grpo", "ktae"]):
        alone = _lab_rows(tiny_ckpt, tmp_path, [name], f"alone{k}")
        assert alone[name] == both[name], name
        others = pick.sample([m for m in pool if m != name], 2)
        mixed = _lab_rows(tiny_ckpt, tmp_path, [*others, name], f"mixed{k}")
        assert mixed[name] == both[name], (name, others)
