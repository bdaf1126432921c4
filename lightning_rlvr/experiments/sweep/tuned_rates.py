"""Rates a tuning sweep chose: whether a cell and its baseline each ran at its own bracketed rate.

Layer: experiments (imports the sweep's ``spec``, ``rows`` and ``choice``; ``plan`` calls it for a claim
with ``tuned_in``). A comparison at unmatched learning rates does not decide a claim about the method: the
gap may be the rate's. The exception is the comparison most papers make, each arm at its own tuned rate,
and it counts only when a tuning sweep shows it: the tuning sweep's ``report.choose: model.lr`` chose, and
bracketed (``choice.choose_values``), the very rate each arm ran at. Arms are matched across the two
sweeps by their config files, not by their labels (``sc_grpo_own_rate`` in a study is ``sc_grpo.yaml``,
``sc_grpo`` in the tuning sweep).
"""

from __future__ import annotations

from pathlib import Path

from .choice import choose_values
from .rows import read_results_csv
from .spec import Sweep, expand, load_sweep

RATE = "model.lr"


def arm_files(sweep: Sweep, without: str | None = None) -> dict[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """{a cell's (axis, value) pairs, sorted, ``without`` one axis: the config files its runs add to the
    sweep's own}."""
    out = {}
    for run in expand(sweep):
        cell = tuple(sorted((a, v) for a, v in run.cell if a != without))
        out[cell] = tuple(c for c in run.configs if c not in sweep.configs)
    return out


def chosen_rates(tuning: str | Path, root: Path = Path(".")) -> dict[tuple[str, ...], str]:
    """{the config files of an arm: the ``model.lr`` the tuning sweep chose for it} over every bracketed
    choice (an unbracketed one chooses nothing); ValueError (one line) when the sweep tunes no rate or its
    results are not there."""
    sweep = load_sweep(root / tuning)
    settings = sweep.report
    if settings.choose != RATE:
        raise ValueError(f"{tuning}: report.choose is {settings.choose!r}, not {RATE}: it tunes no rate")
    table = root / sweep.report_dir / "results.csv"
    if not table.is_file():
        raise ValueError(f"{table}: not found (run the tuning sweep, or give another tuned_in)")
    axes, rows = read_results_csv(table)
    files = arm_files(sweep, without=RATE)
    out = {}
    for e in choose_values(axes, rows, RATE, settings.choose_by, settings.tie, settings.tie_tolerance):
        if e["chosen"] is not None:
            out[files[tuple(sorted(e["cell"].items()))]] = f"{float(e['chosen']):g}"
    return out


def tuned_basis(
    sweep: Sweep, cells: tuple[dict, dict], rates: tuple[str, str], tuning: str, root: Path = Path(".")
) -> tuple[bool, str]:
    """(whether both arms ran at their tuned rates, the words for it) for ``cells`` (the compared cell and
    its baseline's, {axis: value}) that ran at ``rates``."""
    try:
        chosen = chosen_rates(tuning, root)
    except ValueError as err:
        return False, f"tuned rates unknown: {err}"
    files = arm_files(sweep)
    name = Path(tuning).stem
    for cell, rate in zip(cells, rates):
        arm = files.get(tuple(sorted((a, str(v)) for a, v in cell.items())))
        if arm is None or chosen.get(arm) is None:
            return False, f"{name} chose no rate for {', '.join(map(str, cell.values()))}"
        if float(chosen[arm]) != float(rate):
            return False, f"{name} chose {chosen[arm]} for {', '.join(map(str, cell.values()))}, not {rate}"
    return True, f"each at its own tuned rate: {rates[0]} vs {rates[1]}, chosen and bracketed in {name}"
