"""The report's prompt-level section: each cell against the baseline prompt by prompt, and what a larger
test set would buy.

Layer: ``experiments`` (reads the per-prompt files each run's test wrote, ``core/per_prompt.py``, in its
run directory or as the sweep archive restored it). The arithmetic is ``experiments/prompt_level.py``.
Runs pair as the seed-paired comparison pairs them: the same seed and the same warm start. A sweep whose
runs predate per-prompt files gets no section.
"""

from __future__ import annotations

import math
from pathlib import Path

from ...core.per_prompt import FOLDER, file_name, read_results
from ..prompt_level import Decomposition, PromptScore, decompose, pair_prompts, prompt_scores
from .rows import START, baseline_key, cell_label, display_names, rows_by_cell_and_seed
from .spec import ReportSettings

TEST = "test"  # the evaluation the section reads: the final checkpoint's test
FACTORS = (2, 4)  # test sets this many times as large


def test_scores(run_directory: Path) -> dict[str, PromptScore] | None:
    """The run's test per-prompt scores (``logs/<version>/per_prompt/test.csv.gz``), None without one."""
    for folder in sorted((run_directory / "logs").rglob(FOLDER)):
        if (folder / file_name(TEST)).is_file():
            return prompt_scores(read_results(folder, TEST))
    return None


def _pairs(axes: list[str], rows: list[dict], runs_dir: Path, settings: ReportSettings) -> list[tuple]:
    """(cell row, [(seed, cell's scores, baseline's scores)]) per non-baseline cell with per-prompt files."""
    by_cell = rows_by_cell_and_seed(axes, rows)
    scores: dict[str, dict[str, PromptScore] | None] = {}

    def of(row: dict) -> dict[str, PromptScore] | None:
        if row["run_id"] not in scores:
            scores[row["run_id"]] = test_scores(runs_dir / row["run_id"])
        return scores[row["run_id"]]

    out = []
    for key, seeds in by_cell.items():
        base = by_cell.get(baseline_key(axes, key, settings.baseline))
        if base is None or base is seeds:
            continue
        paired = []
        for seed in sorted(seeds, key=lambda s: (len(s), s)):
            mine, theirs = seeds[seed], base.get(seed)
            if theirs is None or str(mine.get(START, "")) != str(theirs.get(START, "")):
                continue  # another warm start: not a pair (as in the seed-paired comparison)
            a, b = of(mine), of(theirs)
            if a and b:
                paired.append((seed, a, b))
        if paired:
            out.append((next(iter(seeds.values())), paired))
    return out


def _points(value: float, signed: bool = False) -> str:
    return "-" if math.isnan(value) else f"{100 * value:{'+' if signed else ''}.1f}"


def _sd(variance: float) -> str:
    return _points(math.sqrt(variance)) if variance >= 0 else "-"


def decomposition_cells(dec: Decomposition, power: float, level: float) -> list[str]:
    """SD observed, its evaluation / binomial / training parts (as SDs), SD and MDD now and at FACTORS x."""
    cells = [_points(dec.sd), _sd(dec.evaluation), _sd(dec.binomial), _sd(dec.training)]
    if dec.seeds < 2:
        return [*cells, "-", "-"]
    sds = [dec.sd_at(f) for f in FACTORS]
    mdds = [dec.mdd_at(f, power, level) for f in (1, *FACTORS)]
    return cells + [" / ".join(_points(v) for v in sds)] + [" / ".join(_points(v) for v in mdds)]


def prompt_section(axes: list[str], rows: list[dict], runs_dir: Path, settings: ReportSettings) -> str:
    """The section's markdown; empty when no cell and its baseline both have per-prompt test files."""
    found = _pairs(axes, rows, runs_dir, settings)
    if not found:
        return ""
    pct = round(settings.level * 100)
    names = display_names(axes, rows)
    seeds = [
        "| cell | seed | prompts | difference [95% prompt-paired interval] | r | same majority verdict |",
        "|---|---|---|---|---|---|",
    ]
    seeds[0] = seeds[0].replace("95%", f"{pct}%")
    factors = " / ".join(f"{f}x" for f in FACTORS)
    noise = [
        "| cell | seeds | prompts | SD of the difference | evaluation SD | binomial SD if independent "
        f"| training SD | SD at {factors} prompts | MDD now / {factors} prompts |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row, paired in found:
        label = cell_label(axes, row, names)
        for seed, a, b in paired:
            p = pair_prompts(a, b, settings.level)
            interval = f"{_points(p.diff, True)} [{_points(p.low, True)}, {_points(p.high, True)}]"
            r = "-" if math.isnan(p.r) else f"{p.r:.2f}"
            seeds.append(f"| {label} | {seed} | {p.prompts} | {interval} | {r} | {100 * p.agree:.0f}% |")
        dec = decompose([(a, b) for _, a, b in paired])
        cells = decomposition_cells(dec, settings.power, settings.level)
        noise.append(f"| {label} | {dec.seeds} | {dec.prompts} | " + " | ".join(cells) + " |")
    note = (
        "Each test prompt scored by both runs of a seed (the same prompt id), in points: the cell's mean "
        f"correctness minus the baseline's with its {pct}% interval over prompts (evaluation noise alone), "
        "r the correlation of the two runs' per-prompt correctness, and the share of prompts both runs "
        "solve, or both fail, in most samples.\n"
    )
    split = (
        "The seed-paired difference's SD split in two (`experiments/prompt_level.py`): the evaluation part, "
        "which a larger test set shrinks (the seed-by-prompt residual of a two-way analysis over the prompts "
        "every seed scored), and the training part, which only more seeds shrink; beside them, the binomial "
        "noise of the samples per prompt had the two runs sampled independently (evaluation shares "
        "`eval_seed`, so runs whose policies agree draw alike and the true share is smaller). Then the SD "
        f"and the MDD ({round(settings.power * 100)}% power, these seeds) with the test set 2 and 4 times as "
        "large. With one seed the evaluation part is the prompt-paired SE (an upper bound) and the training "
        "part is unknown.\n"
    )
    return "\n".join([note, *seeds, "", split, *noise]) + "\n"
