"""Whether a run directory holds the run a sweep file describes now: its recorded spec and markers.

Layer: experiments (imports ``spec``). A run records ``SPEC`` (its config files, a digest of each
file's parsed YAML, its overrides) when its fit starts; ``is_finished`` and the runner compare it with
the sweep file as it reads now, so a run whose overrides or config values changed runs again. A
config file whose digest changed but whose resolved settings did not (``sweep/settings.py``) keeps its
runs: their ``SPEC`` is re-recorded with the new digests, so the check runs once.
"""

from __future__ import annotations

import json

from .config_history import config_digest
from .settings import differences_at_recorded_configs, resolved_differences
from .spec import DONE, SPEC, Run, Sweep, run_dir


def run_spec(run: Run) -> dict:
    """What a run is (config files, their digests, overrides), as it reads back from ``SPEC``."""
    spec = {"configs": list(run.configs), "overrides": run.overrides}
    spec["config_digests"] = {path: config_digest(path) for path in run.configs}
    return json.loads(json.dumps(spec, default=str))


def same_spec(recorded: dict, now: dict) -> bool:
    """A recorded ``SPEC`` is the run now; one recorded before digests existed matches on the rest."""
    if "config_digests" not in recorded:
        now = {k: v for k, v in now.items() if k != "config_digests"}
    return recorded == now


def stale_configs(sweep: Sweep, run: Run) -> list[str]:
    """The config files of a finished run whose content changed since it ran (none if it recorded none)."""
    d = run_dir(sweep, run)
    if not ((d / DONE).is_file() and (d / SPEC).is_file()):
        return []
    before, now = json.loads((d / SPEC).read_text()).get("config_digests") or {}, run_spec(run)
    return [path for path, digest in now["config_digests"].items() if before.get(path, digest) != digest]


def same_settings(sweep: Sweep, run: Run, recorded: dict) -> bool:
    """Only config digests differ, and the run's resolved settings are the sweep's now: re-record them."""
    now = run_spec(run)
    if {k: v for k, v in recorded.items() if k != "config_digests"} != {
        k: v for k, v in now.items() if k != "config_digests"
    }:
        return False  # other config files or overrides: another run
    found = resolved_differences(sweep, run)
    if found is None:  # an older archive kept no resolved config: resolve the files as the run read them
        found = differences_at_recorded_configs(sweep, run, recorded.get("config_digests") or {})
    if found != []:
        return False
    (run_dir(sweep, run) / SPEC).write_text(json.dumps(now, indent=1))
    return True


def is_finished(sweep: Sweep, run: Run) -> bool:
    """The run completed (``DONE``) with the specification it has now.

    Run ids name the grid point, not every override: a run done before an override (a new lr in
    ``axis_overrides``) or a value in its config files changed keeps its id, and its recorded ``SPEC``
    tells it apart: it is run again. A run without ``SPEC`` (older) counts by ``DONE`` alone."""
    d = run_dir(sweep, run)
    if not (d / DONE).is_file():
        return False
    if not (d / SPEC).is_file():
        return True
    recorded = json.loads((d / SPEC).read_text())
    return same_spec(recorded, run_spec(run)) or same_settings(sweep, run, recorded)
