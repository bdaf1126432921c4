"""A run's first lines say how many torch threads it uses and why; a fit's last line says where its
checkpoint went. A bad ``OMP_NUM_THREADS`` is one error line."""

from __future__ import annotations

import pytest
import torch

from lightning_rlvr.cli.options import DEFAULT_THREADS


@pytest.mark.parametrize("given", [None, "2"])
def test_threads_are_the_default_or_omp_num_threads_and_said_once(run_cli, monkeypatch, capsys, given):
    before = torch.get_num_threads()
    if given is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", given)
    try:
        fit = run_cli("fit", "--trainer.max_steps", "1", "--model.warm_start", "null")
        expected = DEFAULT_THREADS if given is None else int(given)
        assert torch.get_num_threads() == expected
    finally:
        torch.set_num_threads(before)
    err = capsys.readouterr().err.splitlines()
    threads = [x for x in err if x.startswith("lightning-rlvr: threads:")]
    assert len(threads) == 1 and threads[0].startswith(f"lightning-rlvr: threads: {expected} ")
    assert ("OMP_NUM_THREADS=2" in threads[0]) == (given is not None) and "OMP_NUM_THREADS" in threads[0]
    last = fit.trainer.checkpoint_callback.last_model_path
    said = [x for x in err if x.startswith("lightning-rlvr: checkpoint:")]
    assert said == [x for x in said if last in x and "test --ckpt_path" in x] and len(said) == 1
    step = torch.load(last, weights_only=True, mmap=True)["global_step"]
    assert f"(step {step})" in said[0]  # the checkpoint's own step


@pytest.mark.parametrize("bad", ["0", "two", "-1", "1.5"])
def test_a_bad_omp_num_threads_is_one_error_line(run_cli, monkeypatch, capsys, bad):
    monkeypatch.setenv("OMP_NUM_THREADS", bad)
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--trainer.max_steps", "1")
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lightning-rlvr: error: OMP_NUM_THREADS='{bad}'"), lines
