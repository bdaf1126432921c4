"""Keyed sampling (common random numbers): a row's draws depend on (seed, step, problem, sample) alone,
so engines, batch composition and compaction do not change what a row samples."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from lightning_rlvr import AdditionTask, RLVRModule, TinyPolicy
from lightning_rlvr.collect import Sampler, roll_out
from lightning_rlvr.collect.single_turn import generate_rollout, row_keys
from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.core.rng import RowStreams
from lightning_rlvr.engines.base import Sampling
from lightning_rlvr.engines.fast import FastEngine
from lightning_rlvr.engines.hf import HFGenerateEngine
from lightning_rlvr.engines.vllm import VLLMEngine
from tests.conftest import REPO
from tests.toy_env import EchoWords

POLICY = TinyPolicy(layers=2, hidden=32, heads=4, intermediate=64, max_positions=96)
TASK = AdditionTask(digits=2)
SETTINGS = [Sampling(24), Sampling(24, 0.7, 1.0, 5), Sampling(24, 1.3, 0.8, 0)]
ENGINES = {
    "hf": HFGenerateEngine,
    "fast": FastEngine,
    "fast_compact_each": lambda: FastEngine(compact_at=1.0),
    "fast_no_compaction": lambda: FastEngine(compact_at=0.0),
}


def problems(first: int, k: int):
    return [TASK.train_problem(i) for i in range(first, first + k)]


def keyed(engine, model, tok, probs, sampling=SETTINGS[0], key=(0, 5), G=4):
    return generate_rollout(engine, model, tok, probs, G, sampling, key=key)


def test_row_streams_draw_by_key_alone_whatever_rows_surround_them():
    a, b = RowStreams([11, 22, 33]), RowStreams([33, 99])
    first = a.exponential([0, 1, 2], 50)
    assert torch.equal(first[2], b.exponential([0], 50)[0])  # key 33, first draw, alone or in a batch
    assert torch.equal(a.exponential([2], 50)[0], b.exponential([0], 50)[0])  # second draws agree too
    assert not torch.equal(first[0], first[1])
    # a row skipped in a draw is not advanced by it: row 0's second draw is the same as if drawn alone
    assert torch.equal(a.exponential([0], 50)[0], RowStreams([11]).exponential([0], 50 * 2)[0, 50:])


def test_keyed_draws_sample_the_distribution_and_leave_the_global_rng_alone():
    state = torch.random.get_rng_state()
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    noise = RowStreams(list(range(20000))).exponential(list(range(20000)), 4)
    freq = torch.bincount((p / noise).argmax(-1), minlength=4).float() / 20000
    assert torch.allclose(freq, p, atol=0.015), freq
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.parametrize("sampling", SETTINGS)
@pytest.mark.parametrize("name", ["fast", "fast_compact_each", "fast_no_compaction"])
def test_hf_and_fast_engines_sample_the_same_keyed_tokens(name, sampling):
    model, tok = POLICY.load()
    want = keyed(HFGenerateEngine(), model, tok, problems(0, 6), sampling)
    got = keyed(ENGINES[name](), model, tok, problems(0, 6), sampling)
    assert torch.equal(got.completion_ids, want.completion_ids)
    if sampling == SETTINGS[0]:  # plain sampling reaches EOS on this model:
        assert want.lengths.min() < want.lengths.max()  # rows finished at different steps (compaction ran)


@pytest.mark.parametrize("name", ["hf", "fast"])
def test_a_rows_completion_does_not_depend_on_the_batch_or_the_global_rng(name):
    model, tok = POLICY.load()
    torch.manual_seed(1)
    big = keyed(ENGINES[name](), model, tok, problems(0, 6))  # rows of problems 0..5, G = 4
    torch.manual_seed(2)
    state = torch.random.get_rng_state()
    small = keyed(ENGINES[name](), model, tok, problems(3, 2))  # problems 3, 4 in another batch
    assert torch.random.get_rng_state().equal(state)  # keyed sampling neither reads nor moves it
    T = small.completion_ids.shape[1]
    assert torch.equal(big.completion_ids[12:20, :T], small.completion_ids)
    # another step (or seed) draws other numbers
    other = keyed(ENGINES[name](), model, tok, problems(3, 2), key=(0, 6))
    assert not torch.equal(other.completion_ids, small.completion_ids)


def test_row_keys_name_the_problem_and_the_sample_not_the_batch_position():
    probs = problems(0, 3)
    keys = row_keys((0, 1), probs, 2)
    assert len(set(keys)) == 6
    assert row_keys((0, 1), probs[::-1], 2)[:2] == keys[4:]
    assert row_keys((1, 1), probs, 2) != keys and row_keys((0, 2), probs, 2) != keys


def test_two_modules_with_one_seed_collect_the_same_keyed_rollout_and_stream_is_the_default():
    torch.manual_seed(4)
    stream = RLVRModule(task=TASK, policy=POLICY, max_new_tokens=12, group_size=4)
    assert stream.sampling_key == "stream"
    rollouts = []
    for draws_before in (0, 3):  # the second module's global RNG has moved: keyed rows do not care
        torch.manual_seed(4)
        module = RLVRModule(task=TASK, policy=POLICY, max_new_tokens=12, group_size=4, sampling_key="keyed")
        torch.rand(draws_before)
        rollouts.append(module.collect(problems(0, 4))[0].rollout.completion_ids)
    assert torch.equal(rollouts[0], rollouts[1])


@pytest.mark.parametrize(
    "kwargs,says",
    [
        ({"sampling_key": "Keyed"}, "model.sampling_key must be 'stream' or 'keyed'"),
        ({"sampling_key": None}, "model.sampling_key must be 'stream' or 'keyed'"),
        ({"sampling_key": "keyed", "engine": VLLMEngine()}, "VLLMEngine cannot sample keyed rows"),
    ],
)
def test_bad_sampling_key_settings_are_one_clear_line(kwargs, says):
    with pytest.raises(RLVRError, match=says) as err:
        RLVRModule(task=TASK, policy=POLICY, **kwargs)
    assert "\n" not in str(err.value)


def test_engines_that_cannot_key_refuse_keyed_sampling():
    model, tok = POLICY.load()
    ids = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(RLVRError, match="set model.sampling_key: stream"):
        VLLMEngine().generate(model, ids, ids, 1, Sampling(4), 0, 1, keys=[1])


def _episodes(engine, games: range, key=(0, 5), G: int = 3):
    model, tok = POLICY.load()
    env = EchoWords()
    sampler = Sampler(engine, model, tok, Sampling(6), key=key)
    return roll_out(env, sampler, [env.train_problem(i) for i in games], G).rollout


@pytest.mark.parametrize("name", ["hf", "fast"])
def test_a_keyed_episode_does_not_depend_on_the_batch_the_other_episodes_or_the_global_rng(name):
    torch.manual_seed(1)
    big = _episodes(ENGINES[name](), range(0, 4))  # games 0..3, G = 3: rows 6..11 play games 2 and 3
    torch.manual_seed(2)
    state = torch.random.get_rng_state()
    small = _episodes(ENGINES[name](), range(2, 4))
    assert torch.random.get_rng_state().equal(state)  # keyed episodes neither read nor move it
    T = small.completion_ids.shape[1]
    assert torch.equal(big.completion_ids[6:12, :T], small.completion_ids)
    assert torch.equal(big.policy_mask[6:12, :T], small.policy_mask)
    assert (big.completion_ids[6:12, T:] == big.pad_id).all()
    # the episodes are not trivially alike: rows of one game differ, and another step draws others
    assert len({tuple(r.tolist()) for r in small.completion_ids}) > 1
    other = _episodes(ENGINES[name](), range(2, 4), key=(0, 6))
    assert not torch.equal(other.completion_ids, small.completion_ids)


def test_hf_and_fast_engines_play_the_same_keyed_episodes():
    hf, fast = _episodes(HFGenerateEngine(), range(0, 3)), _episodes(FastEngine(), range(0, 3))
    assert torch.equal(hf.completion_ids, fast.completion_ids)
    assert torch.equal(hf.rewards, fast.rewards)


def _coupling_script():
    spec = importlib.util.spec_from_file_location("bench_coupling", REPO / "benchmarks" / "coupling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_coupling_counts_the_steps_two_methods_sample_one_rollout(tmp_path, capsys):
    hashes = {  # per run: the step hashes; grpo and drgrpo share seed 0's first two steps when keyed
        ("grpo", "keyed"): [1, 2, 3, 4],
        ("dr", "keyed"): [1, 2, 9, 4],
        ("grpo", "stream"): [1, 2, 3, 4],
        ("dr", "stream"): [1, 5, 6, 7],
    }
    rows = ["run_id,method,model.sampling_key,seed,test/pass@1"]
    for (method, key), values in hashes.items():
        for seed, score in [(0, 0.5), (1, 0.6)]:
            run = f"{method}__{key}__{seed}"
            score += 0.1 * (method == "dr") + 0.05 * seed * (method == "dr") * (key == "stream")
            rows.append(f"{run},{method},{key},{seed},{score}")
            fit = tmp_path / "runs" / run / "logs" / "fit"
            fit.mkdir(parents=True)
            lines = ["step,train/rollout_hash,val/pass@1"] + [f"{s},{h}.0," for s, h in enumerate(values)]
            (fit / "metrics.csv").write_text("\n".join([*lines, "4,,0.5"]) + "\n")
    (tmp_path / "results.csv").write_text("\n".join(rows) + "\n")
    assert _coupling_script().main([str(tmp_path)]) == 0
    text = (tmp_path / "coupling.md").read_text()
    assert "| keyed | 0 | 2 | 3 | 4 | +10.0 |" in text and "| stream | 1 | 1 | 1 | 4 | +15.0 |" in text
    assert "| keyed | 2 | 2 | +10.00 | 0.00 |" in text and "| stream | 2 | 1 | +12.50 | 3.54 |" in text
    (tmp_path / "results.csv").write_text("run_id,method,seed,test/pass@1\n")
    assert _coupling_script().main([str(tmp_path)]) == 2
    assert "no column 'model.sampling_key'" in capsys.readouterr().err


def test_coupling_row_by_row_from_sample_logs(tmp_path):
    rows = ["run_id,method,model.sampling_key,seed,test/pass@1"]
    for method in ("grpo", "dr"):
        run = f"{method}__keyed__0"
        rows.append(f"{run},{method},keyed,0,0.5")
        fit = tmp_path / "runs" / run / "logs" / "fit"
        fit.mkdir(parents=True)
        (fit / "metrics.csv").write_text("step,train/rollout_hash\n0,1.0\n")
    (tmp_path / "results.csv").write_text("\n".join(rows) + "\n")
    completions = {"grpo": ["a", "b", "c", "d"], "dr": ["a", "x", "c", "d"]}  # step 1: rows 0-1, step 2: 2-3
    args = []
    for method, texts in completions.items():
        lines = [json.dumps({"step": 1 + i // 2, "completion": t}) for i, t in enumerate(texts)]
        (tmp_path / f"{method}.jsonl").write_text("\n".join(lines) + "\n")
        args.append(f"{method}:keyed={tmp_path / f'{method}.jsonl'}")
    assert _coupling_script().main([str(tmp_path), "--samples", *args]) == 0
    assert "- keyed: 0.50 1.00 (mean 0.75)" in (tmp_path / "coupling.md").read_text()
