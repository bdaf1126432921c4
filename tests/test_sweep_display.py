"""How a sweep's tables and curves name and draw its cells."""

from __future__ import annotations

import pytest

from lightning_rlvr.experiments.sweep import curves as sc
from lightning_rlvr.experiments.sweep import report as rep
from lightning_rlvr.experiments.sweep import rows as run_rows
from lightning_rlvr.experiments.sweep.comparison import comparison_table
from lightning_rlvr.experiments.sweep.spec import ReportSettings


def _rows(values: list[str]) -> list[dict]:
    return [
        {
            "run_id": f"{v}__seed={s}",
            "method": v,
            "seed": str(s),
            "test/pass@1": str(0.1 * s + 0.01 * i),
            "val/pass@1_final": "0.2",
        }
        for i, v in enumerate(values)
        for s in range(3)
    ]


def test_a_config_list_with_one_stem_is_named_once_in_tables_and_curves():
    assert run_rows.display_value("hp_rlvr+hp_rlvr") == "hp_rlvr"
    assert run_rows.display_value("grpo+tiny_env") == "grpo+tiny_env"  # different parts stay
    rows = _rows(["grpo", "hp_rlvr+hp_rlvr"])
    table = rep.markdown_table(["method"], rows)
    assert "| hp_rlvr | 3 |" in table and "hp_rlvr+hp_rlvr" not in table
    settings = ReportSettings(
        {"method": "grpo"}, ["test/pass@1"], None, 0.95, 0.8, None, "val/pass@1_final", []
    )
    comparison = comparison_table(["method"], rows, settings)
    assert "| hp_rlvr | test/pass@1 |" in comparison and "hp_rlvr+hp_rlvr" not in comparison
    names = run_rows.display_names(["method", "lr"], [{"method": "hp_rlvr+hp_rlvr", "lr": "1e-4"}])
    assert run_rows.cell_label(["method", "lr"], {"method": "hp_rlvr+hp_rlvr", "lr": "1e-4"}, names) == (
        "method=hp_rlvr, lr=1e-4"
    )


def test_two_values_that_would_read_the_same_keep_their_full_names():
    names = run_rows.display_names(["method"], _rows(["hp_rlvr", "hp_rlvr+hp_rlvr", "sc_grpo+sc_grpo"]))
    assert names["method"] == {
        "hp_rlvr": "hp_rlvr",
        "hp_rlvr+hp_rlvr": "hp_rlvr+hp_rlvr",
        "sc_grpo+sc_grpo": "sc_grpo",
    }


def _curves(n: int) -> dict:
    # (step, mean, low, high, seeds): bands that reach below 0 and above 1
    return {
        f"m{i}": {
            "train/reward_mean": [(s, 0.5, -0.3, 1.4, 3) for s in range(10)],
            "val/pass@1": [(s, 0.05 * i, -0.2, 1.3, 3) for s in (0, 5, 10)],
        }
        for i in range(n)
    }


@pytest.fixture
def figure():
    import matplotlib.pyplot as plt

    figs = []

    def make(curves: dict):
        figs.append(sc.curves_figure(curves, "t"))
        return figs[-1]

    yield make
    for fig in figs:
        plt.close(fig)


def test_the_curves_have_y_labels_and_rate_bands_within_0_and_1(figure):
    fig = figure(_curves(2))
    reward, rate = fig.axes[:2]
    assert reward.get_ylabel() and rate.get_ylabel()
    assert "pass@1" in rate.get_ylabel()
    import numpy as np

    rate_bands = np.concatenate([p.vertices for c in rate.collections for p in c.get_paths()])
    assert rate_bands[:, 1].min() >= 0.0 and rate_bands[:, 1].max() <= 1.0
    reward_bands = np.concatenate([p.vertices for c in reward.collections for p in c.get_paths()])
    assert reward_bands[:, 1].min() < 0.0  # a reward is not a rate: its band is drawn as computed


@pytest.mark.parametrize("cells", [4, 13])
def test_the_curves_use_distinct_hues_never_light_dark_pairs(figure, cells):
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    fig = figure(_curves(cells))
    lines = [ln for ln in fig.axes[1].get_lines()]
    tab10 = {to_rgb(c) for c in plt.get_cmap("tab10").colors}
    assert {to_rgb(ln.get_color()) for ln in lines} <= tab10
    looks = {(to_rgb(ln.get_color()), str(ln.get_linestyle())) for ln in lines}
    assert len(looks) == cells  # past 10 cells the line style tells them apart
