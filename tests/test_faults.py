"""Fault injection: every writer survives SIGKILL at any moment and a full disk; runs never share folders.

Each writer the project uses for files a reader needs later is one ``Writer`` entry (how to write
version ``v`` of its output, how to read back which version is there). Every entry goes through:

- ``test_a_writer_killed_at_random_points_leaves_a_whole_version``: a forked child writes versions in
  a loop and is SIGKILLed at random moments (fixed seed), many times; the reader must find a whole
  version every time (the last one or an earlier one), never a torn file;
- ``test_a_writer_on_a_full_disk_fails_and_keeps_the_previous_version``: a child whose file size
  limit (``RLIMIT_FSIZE``, unprivileged: the kernel fails the write as on a full disk) is below the
  output's size must fail, leave the previous version readable and leave no temporary behind.

To cover another writer (the warm-start cache, an export, a credit-lab table), add one ``Writer``.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import os
import random
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from jsonargparse import Namespace

from lightning_rlvr.checkpoint_files import (
    AtomicCheckpointIO,
    checkpoint_problem,
    claim_checkpoint_dir,
    claim_log_version,
    find_last_checkpoint,
    release_claims,
    resolve_ckpt_path,
)
from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.core.files import write_text
from lightning_rlvr.experiments.sweep.curves import write_curves_csv
from lightning_rlvr.experiments.sweep.rows import write_results_csv

KILLS = 12  # SIGKILLs per writer
SEED = 0


@dataclass
class Writer:
    name: str
    file: str  # the output's name in its folder
    write: Callable[[Path, int], None]  # write version v
    read: Callable[[Path], int]  # the version there; raises on a torn or foreign file


def _write_ckpt(path: Path, v: int) -> None:
    AtomicCheckpointIO().save_checkpoint(
        {"state_dict": {"w": torch.full((400_000,), float(v))}, "v": v}, path
    )


def _read_ckpt(path: Path) -> int:
    assert checkpoint_problem(path) is None, checkpoint_problem(path)
    ckpt = torch.load(path, weights_only=True)
    assert bool((ckpt["state_dict"]["w"] == ckpt["v"]).all())
    return ckpt["v"]


def _write_results(path: Path, v: int) -> None:
    write_results_csv([{"run_id": f"r{i}", "seed": i, "v": v} for i in range(3000)], path)


def _read_rows(path: Path, n: int, column: str) -> int:
    with open(path, newline="") as f:
        values = {row[column] for row in csv.DictReader(f)}
    assert len(values) == 1, "rows of two versions"
    with open(path, newline="") as f:
        assert sum(1 for _ in csv.DictReader(f)) == n, "missing rows"
    return int(float(values.pop()))


def _write_curves(path: Path, v: int) -> None:
    write_curves_csv(
        {f"cell{i}": {"val/pass@1": [(s, v, v, v, 3) for s in range(60)]} for i in range(50)}, path
    )


def _write_md(path: Path, v: int) -> None:  # results.md, DONE, spec.json, test_metrics.json
    write_text(path, f"version {v}\n" + "| a | b |\n" * 20000 + f"end {v}\n")


def _read_md(path: Path) -> int:
    lines = path.read_text().splitlines()
    assert lines[0].split()[0] == "version" and lines[-1] == f"end {lines[0].split()[1]}", "torn file"
    return int(lines[0].split()[1])


WRITERS = [
    Writer("checkpoint", "last.ckpt", _write_ckpt, _read_ckpt),
    Writer("results.csv", "results.csv", _write_results, lambda p: _read_rows(p, 3000, "v")),
    Writer("curves.csv", "curves.csv", _write_curves, lambda p: _read_rows(p, 3000, "mean")),
    Writer("results.md", "results.md", _write_md, _read_md),
]


def _in_child(body: Callable[[], int]) -> int:
    """Fork; the child runs ``body`` and exits with its code (never returns into pytest)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    return pid


def _temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]


@pytest.mark.parametrize("writer", WRITERS, ids=lambda w: w.name)
def test_a_writer_killed_at_random_points_leaves_a_whole_version(writer, tmp_path):
    rng = random.Random(SEED)
    path = tmp_path / writer.file
    writer.write(path, 0)
    found, mid_write = [], 0
    # at least KILLS kills, and on until a third of KILLS landed inside a write (a fast machine's writes
    # are short, so more random kills may be needed to hit them); bounded
    for kill in range(KILLS * 10):
        if kill >= KILLS and mid_write >= KILLS // 3:
            break
        first = 1000 * (kill + 1)

        def loop(first: int = first) -> int:
            v = first
            while True:
                writer.write(path, v)
                v += 1

        pid = _in_child(loop)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        version = writer.read(path)  # whole: the one before the loop or one the loop finished
        assert version == found[-1] if version < first and found else True
        found.append(version)
        leftovers = _temporaries(tmp_path)
        mid_write += bool(leftovers)
        for p in leftovers:  # what a claim of the folder (or the next atomic_dir) removes
            p.unlink()
    assert mid_write >= KILLS // 3, f"only {mid_write} of {KILLS} kills landed inside a write"
    assert len(set(found)) > 1  # the loops did replace the file


def _limited(limit: int, write: Callable[[], None]) -> int:
    """Run ``write`` with files capped at ``limit`` bytes; 0 if it raised a disk error, 3 if it wrote."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        write()
    except RLVRError as err:  # the checkpoint writer's one line
        return 0 if "cannot write checkpoint" in str(err) else 4
    except OSError as err:
        return 0 if err.errno in (errno.EFBIG, errno.ENOSPC) else 5
    return 3


@pytest.mark.parametrize("writer", WRITERS, ids=lambda w: w.name)
def test_a_writer_on_a_full_disk_fails_and_keeps_the_previous_version(writer, tmp_path):
    path = tmp_path / writer.file
    writer.write(path, 7)
    size = path.stat().st_size
    for limit in (0, 1, size // 3, size - 1):  # the disk fills at the start, early, midway, at the end
        pid = _in_child(lambda limit=limit: _limited(limit, lambda: writer.write(path, 8)))
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert writer.read(path) == 7
        assert _temporaries(tmp_path) == []


# ---------------------------------------------------------------------------- checkpoints
def _ckpt(path: Path, step: int) -> None:
    AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.zeros(8)}, "global_step": step}, path)


CORRUPTIONS = {
    "empty": lambda b: b"",
    "truncated-early": lambda b: b[: len(b) // 10],
    "truncated-late": lambda b: b[:-20],
    "zip-index-garbled": lambda b: b[:-60] + bytes(60),
    "another-file": lambda b: b"step: 3\n" * 50,
    "no-state-dict": None,  # a readable torch file that is not a Lightning checkpoint
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_ckpt_path_last_and_a_folder_fall_back_to_the_newest_intact_checkpoint(corruption, tmp_path, capsys):
    folder = tmp_path / "ckpts"
    _ckpt(folder / "epoch=0-step=3.ckpt", 3)
    _ckpt(folder / "last.ckpt", 4)
    now = time.time()
    os.utime(folder / "epoch=0-step=3.ckpt", (now - 10, now - 10))  # as written: the step file, then last
    if CORRUPTIONS[corruption] is None:
        torch.save({"weights": torch.zeros(2)}, folder / "last.ckpt")
    else:
        (folder / "last.ckpt").write_bytes(CORRUPTIONS[corruption]((folder / "last.ckpt").read_bytes()))
    config = Namespace(checkpoint=Namespace(dirpath=str(folder)), trainer=Namespace(logger=False))
    assert Path(find_last_checkpoint(config)).name == "epoch=0-step=3.ckpt"
    assert Path(resolve_ckpt_path(str(folder))).name == "epoch=0-step=3.ckpt"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(line.startswith("lightning-rlvr: warning: ") for line in lines)
    assert all("skipping" in line and "last.ckpt" in line for line in lines)


def test_a_folder_of_several_runs_or_of_none_is_one_error_naming_what_was_expected(tmp_path):
    folder = tmp_path / "ckpts"
    folder.mkdir()
    with pytest.raises(
        RLVRError, match="a folder with no .ckpt file; expected a checkpoint file, or a folder"
    ):
        resolve_ckpt_path(str(folder))
    _ckpt(folder / "last.ckpt", 4)
    _ckpt(folder / "last-v1.ckpt", 9)  # written by two runs before versioned names were turned off
    with pytest.raises(RLVRError, match=r"more than one run \(last-v1.ckpt, last.ckpt\)"):
        resolve_ckpt_path(str(folder))


# ---------------------------------------------------------------------------- runs that never mix
def _config(root: Path, dirpath: Path | None) -> Namespace:
    logger = Namespace(
        class_path="lightning.pytorch.loggers.CSVLogger",
        init_args=Namespace(save_dir=str(root), name="rlvr", version=None),
    )
    return Namespace(
        trainer=Namespace(logger=logger), checkpoint=Namespace(dirpath=str(dirpath) if dirpath else None)
    )


def test_concurrent_fits_on_one_root_get_their_own_version_and_never_share_a_checkpoint_folder(tmp_path):
    n = 4
    go_r, go_w = os.pipe()
    out_r, out_w = os.pipe()

    def claim() -> int:
        os.read(go_r, 1)  # all start at once
        config = _config(tmp_path, None)
        claim_log_version(config)
        version = config.trainer.logger.init_args.version
        try:
            claim_checkpoint_dir(tmp_path / "shared", None)
            ok = 1
        except RLVRError as err:
            ok = 0 if "is being written by another fit" in str(err) else 2
        os.write(out_w, f"{version} {ok}\n".encode())
        time.sleep(30)  # hold the claims until the parent has read every answer
        return 0

    pids = [_in_child(claim) for _ in range(n)]
    os.write(go_w, b"x" * n)
    answers = b""
    while answers.count(b"\n") < n:
        answers += os.read(out_r, 1024)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    rows = [line.split() for line in answers.decode().splitlines()]
    assert sorted(int(v) for v, _ in rows) == list(range(n))  # version_0 .. version_3, one each
    assert sorted(ok for _, ok in rows) == ["0"] * (n - 1) + ["1"]  # one fit writes the shared folder
    claim_checkpoint_dir(tmp_path / "shared", None)  # the holders died: the lock died with them
    release_claims()


def test_a_new_run_in_a_folder_with_another_runs_checkpoints_stops_and_a_resume_goes_on(tmp_path):
    folder = tmp_path / "ckpts"
    _ckpt(folder / "last.ckpt", 4)
    (folder / ".last.ckpt.x1y2.tmp").write_bytes(b"half")  # a killed writer's leftover
    with pytest.raises(RLVRError, match="already holds another run's checkpoints \\(last.ckpt\\); resume"):
        claim_checkpoint_dir(folder, None)
    with pytest.raises(RLVRError, match="already holds another run's"):
        claim_checkpoint_dir(folder, str(tmp_path / "elsewhere" / "last.ckpt"))  # from another run's file
    claim_checkpoint_dir(folder, str(folder / "last.ckpt"))  # resuming this folder's run
    with contextlib.suppress(Exception):
        assert _temporaries(folder) == []
    release_claims()
