"""A results.csv from text, read as the sweep report reads it (shared by the sweep report's tests)."""

from __future__ import annotations

from pathlib import Path

from lightning_rlvr.experiments.sweep import rows as run_rows


def read_rows(text: str, tmp_path: Path) -> tuple[list[str], list[dict]]:
    """(axes, rows) of a results.csv holding ``text``."""
    path = tmp_path / "results.csv"
    path.write_text(text)
    return run_rows.read_results_csv(path)
