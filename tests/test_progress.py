"""Progress of long steps (game pool, warm start, evaluation) when output goes to a file, not a terminal."""

from __future__ import annotations

import io
import json
import re

from lightning_rlvr.core.progress import Progress
from tests.conftest import QUICKSTART, TINY


def test_plain_lines_carry_the_count_the_elapsed_time_and_the_time_left():
    out = io.StringIO()  # not a TTY
    with Progress(3, "textworld pool", unit="games", every_s=0, stream=out) as progress:
        for _ in range(3):
            progress.update()
    lines = out.getvalue().splitlines()
    assert lines[0] == "lightning-rlvr: textworld pool: started, 3 games"
    assert re.fullmatch(r"lightning-rlvr: textworld pool: 1/3 games, \d+ s elapsed, ~\d+ s left", lines[1])
    assert re.fullmatch(r"lightning-rlvr: textworld pool: 3/3 games, \d+ s elapsed \(done\)", lines[-1])
    assert len(lines) == 4  # started, 1/3, 2/3, done: the last count is said once


def test_plain_lines_come_at_most_every_every_s_and_a_bound_gives_no_estimate():
    out = io.StringIO()
    with Progress(200, "warm start", unit="steps", every_s=3600, stream=out, estimate=False) as progress:
        for _ in range(50):
            progress.update()
        progress.set_postfix(acc="0.31")
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("started, at most 200 steps")
    assert len(lines) == 2 and "50/200 steps" in lines[1] and "acc 0.31" in lines[1]
    assert "left" not in lines[1]


def test_status_says_the_steps_of_a_long_unit_at_most_every_every_s():
    out = io.StringIO()
    with Progress(2, "credit lab", unit="batches", every_s=0, stream=out) as progress:
        progress.status(passes="1/3")
        progress.status(passes="2/3")
        progress.update()
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"lightning-rlvr: credit lab: 0/2 batches, \d+ s elapsed, passes 1/3", lines[1])
    assert lines[2].endswith("passes 2/3") and "left" not in lines[2]  # nothing done yet: no estimate
    assert re.fullmatch(r".*: 1/2 batches, \d+ s elapsed, ~\d+ s left, passes 2/3", lines[3])
    quiet = io.StringIO()
    with Progress(2, "credit lab", unit="batches", every_s=3600, stream=quiet) as progress:
        for i in range(5):
            progress.status(passes=f"{i}/5")
    assert len(quiet.getvalue().splitlines()) == 2  # started, done


def test_a_terminal_gets_a_bar_and_no_plain_lines_and_disabled_writes_nothing():
    out = io.StringIO()
    with Progress(3, "val", stream=out, bar=True) as progress:
        progress.update(3)
    assert "lightning-rlvr:" not in out.getvalue()
    quiet = io.StringIO()
    with Progress(3, "val", stream=quiet, enabled=False) as progress:
        progress.update(3)
    assert quiet.getvalue() == ""


def test_building_the_game_pool_reports_progress(tmp_path, monkeypatch, capsys):
    from lightning_rlvr.envs import textworld

    def fake_game(settings, root, name):  # a game's files without TextWorld's seconds
        (root / f"{name}.meta.json").write_text(json.dumps({"settings": settings}))

    monkeypatch.setenv("LIGHTNING_RLVR_CACHE", str(tmp_path))
    monkeypatch.setattr(textworld, "generate_game", fake_game)
    stats = textworld.TextWorldCooking(train_games=2, val_games=1, test_games=0).ensure_pool()
    err = capsys.readouterr().err
    assert stats["generated"] == 3
    assert "textworld pool" in err and "started, 3 games" in err and "3/3 games" in err and "(done)" in err


def test_a_fit_and_a_test_report_warm_start_and_evaluation_progress(run_cli, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LIGHTNING_RLVR_CACHE", str(tmp_path / "cache"))  # the warm start trains, not loads
    fit = run_cli("fit", configs=(QUICKSTART, TINY))
    err = capsys.readouterr().err
    assert "warm start: started, at most 20 steps" in err
    assert re.search(r"warm start [0-9a-f]{16}: 20 steps to sampled accuracy", err)
    assert "val before RL: 1/1 batches" in err and "pass@1" in err
    assert re.search(r"val at step 2: 1/1 batches, \d+ s elapsed, pass@1 \d\.\d{3} \(done\)", err)
    ckpt = fit.trainer.checkpoint_callback.last_model_path
    run_cli("test", "--ckpt_path", ckpt, configs=(), root=tmp_path / "eval")
    assert re.search(r"test: (\d+)/\1 batches, .*pass@1 \d\.\d{3} \(done\)", capsys.readouterr().err)
