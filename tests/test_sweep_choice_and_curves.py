"""The tuning sweep's choice of a value per cell, and the learning-curve figure's legend and styles."""

from __future__ import annotations

import pytest
import yaml

from lightning_rlvr.experiments.sweep import choice
from lightning_rlvr.experiments.sweep import curves as sc
from tests.sweep_rows import read_rows

TUNING = """run_id,method,model.lr,seed,val/pass@1_final
a,grpo,5e-05,0,0.30
b,grpo,0.0001,0,0.40
c,grpo,0.0002,0,0.35
d,shear,5e-05,0,0.10
e,shear,0.0001,0,0.20
f,shear,0.0002,0,0.20
g,hsd,5e-05,0,0.25
h,hsd,0.0001,0,
"""


def test_the_tuning_choice_is_the_best_value_per_method_and_the_first_on_a_tie(tmp_path):
    axes, rows = read_rows(TUNING, tmp_path)
    choices = choice.choose_values(axes, rows, "model.lr", "val/pass@1_final")
    assert [(c["cell"]["method"], c["chosen"]) for c in choices] == [
        ("grpo", "0.0001"),
        ("shear", None),  # 1e-4 tied with 0.0002, the largest tried: not bracketed, so not chosen
        ("hsd", None),  # its 1e-4 run has no value: its one value is both edges
    ]
    assert [c["best"] for c in choices] == ["0.0001", "0.0001", "5e-05"]  # a tie goes to the lower value
    assert [c["extend"] for c in choices] == [[], ["0.0004"], ["a value below 5e-05", "a value above 5e-05"]]
    # grpo's and shear's choices have a tried rate on each side; hsd's only value is its choice
    assert [c["bracketed"] for c in choices] == [True, True, False]
    text = choice.choice_text(axes, rows, "model.lr", "val/pass@1_final")
    assert "| grpo | 0.0001 | 0.300 | 0.400 | 0.350 |" in text
    assert "| shear | none: extend the grid to 0.0004 | 0.100 | 0.200 | 0.200 |" in text
    assert (
        "Not bracketed: shear, hsd (the best model.lr, or one tied with it, is the smallest or largest"
        in text
    )
    # the largest rate tried is at the edge too, compared as numbers (5e-05 < 0.0001), not as text
    top = [r | {"val/pass@1_final": "0.9"} if r["run_id"] == "c" else r for r in rows]
    assert [c["bracketed"] for c in choice.choose_values(axes, top, "model.lr", "val/pass@1_final")][
        0
    ] is False
    block = text.split("```yaml\n")[1].split("```")[0]
    assert yaml.safe_load(block) == {
        "axis_overrides": {
            "method": {"grpo": {"model.lr": 1e-4}}  # only bracketed choices are pasted
        }
    }


@pytest.mark.parametrize("cells", [2, 20])
def test_the_curves_legend_lists_every_cell_once_and_covers_no_panel(cells):
    # (step, mean, low, high, seeds): a val point at every 25 steps, train reward at every step
    curves = {
        f"method=m{i}, model.lr={i}e-4": {
            "train/reward_mean": [(s, 0.01 * i, 0.0, 0.02 * i, 3) for s in range(75)],
            "val/pass@1": [(s, 0.01 * i, 0.0, 0.02 * i, 3) for s in (0, 25, 50, 75)],
        }
        for i in range(cells)
    }
    fig = sc.curves_figure(curves, "t")
    fig.canvas.draw()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == list(curves)
    box = legend.get_window_extent()
    for ax in fig.axes:
        panel = ax.get_window_extent()
        assert box.x0 >= panel.x1 or box.x1 <= panel.x0 or box.y0 >= panel.y1 or box.y1 <= panel.y0
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_curve_styles_stay_distinct_past_the_palette():
    # 13 methods x 5 lrs (a tuning sweep): one colour a method, one line style an lr
    grid = [f"method=m{m}, model.lr={lr}" for m in range(13) for lr in range(5)]
    styles = sc.curve_styles(grid, 20)
    assert len(set(styles.values())) == 65
    assert {styles[f"method=m3, model.lr={lr}"][0] for lr in range(5)} == {3}
    # one axis, 45 cells on a 20-colour palette: colours repeat, styles tell them apart
    single = [f"m{i}" for i in range(45)]
    assert len(set(sc.curve_styles(single, 20).values())) == 45
