"""The README's "Adding a method" example is real code: written out as a file, it trains."""

from __future__ import annotations

import re
import sys

import pytest

from tests.conftest import QUICKSTART, REPO, TINY


def _block(lang: str, marker: str) -> str:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)
    (block,) = [b for b in blocks if b.startswith(marker)]
    return block


def test_the_readme_method_example_fits(tmp_path, run_cli, monkeypatch):
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
    metrics = cli.trainer.callback_metrics
    assert "credit/weight_mean" in metrics
    assert float(metrics["credit/weight_mean"]) == pytest.approx(1.2, abs=0.05)  # floor + entropy / its mean
    sys.modules.pop("lightning_rlvr_example.my_method", None)
