"""With no ``model.engine``, a run samples with ``FastEngine`` where it is exact for the policy (the same
tokens as ``generate`` under a seed) and with ``HFGenerateEngine`` elsewhere, and says which and why."""

from __future__ import annotations

import pytest
import torch

from lightning_rlvr.engines.base import Sampling
from lightning_rlvr.engines.choose import default_engine
from lightning_rlvr.engines.fast import FastEngine
from lightning_rlvr.engines.hf import HFGenerateEngine
from lightning_rlvr.models import TinyPolicy, apply_lora
from lightning_rlvr.module import RLVRModule
from tests.conftest import QUICKSTART, TINY
from tests.tiny_architectures import byte_tokenizer, fit_args, save_hf, tiny_model

TINY_POLICY = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, max_positions=64)


def test_the_tiny_llama_gets_the_fast_engine_and_it_samples_what_generate_samples():
    module = RLVRModule(policy=TINY_POLICY)
    assert type(module.engine) is FastEngine
    (line,) = [s for s in module.settings_lines if s.startswith("model.engine")]
    assert "FastEngine" in line and "--model.engine lightning_rlvr.engines.hf.HFGenerateEngine" in line
    ids = module.tokenizer(["Q 3+4=", "Q 12+5="], return_tensors="pt", padding=True)
    sampling = Sampling(max_new_tokens=12, temperature=1.0)
    tok = module.tokenizer
    rows = []
    for engine in (module.engine, HFGenerateEngine()):
        torch.manual_seed(3)
        gen = engine.generate(
            module.model, ids.input_ids, ids.attention_mask, 4, sampling, tok.pad_token_id, tok.eos_token_id
        )
        rows.append(gen.completion_ids)
    assert torch.equal(rows[0], rows[1])


def test_a_lora_llama_is_still_fast():
    model = apply_lora(TINY_POLICY.load()[0], {"r": 2})
    assert type(default_engine(model)[0]) is FastEngine


@pytest.mark.parametrize("arch", ["qwen2", "gemma2", "gemma3"])
def test_other_architectures_get_generate_with_the_reason_in_one_line(arch):
    model = tiny_model(arch, byte_tokenizer())
    engine, line = default_engine(model)
    assert type(engine) is HFGenerateEngine
    assert "\n" not in line and "HFGenerateEngine" in line and repr(model.config.model_type) in line
    assert "FastEngine supports" in line  # what the fast engine would need


def test_an_engine_given_is_used_as_given():
    module = RLVRModule(policy=TINY_POLICY, engine=HFGenerateEngine())
    assert type(module.engine) is HFGenerateEngine
    assert not [s for s in module.settings_lines if s.startswith("model.engine")]


def settings(err: str) -> dict[str, str]:
    """The run's settings lines (``lightning-rlvr: key: ...`` before any progress line), by key."""
    lines = [line.removeprefix("lightning-rlvr: ") for line in err.splitlines()]
    lines = [line for line in lines if line.startswith(("model.engine:", "prompts:", "val before RL"))]
    first = lines[: next((i for i, line in enumerate(lines) if line.startswith("val")), len(lines))]
    return {line.split(":")[0]: line for line in first}


def test_a_run_names_its_engine_and_prompt_layout_in_its_first_lines(run_cli, tmp_path, capsys):
    run_cli("fit", "--model.warm_start", "null", "--trainer.max_steps", "1")
    said = settings(capsys.readouterr().err)
    assert said["model.engine"].startswith("model.engine: FastEngine (chosen")
    assert said["prompts"].startswith("prompts: plain layout") and "model.prompt_format" in said["prompts"]
    policy = save_hf(tmp_path / "qwen", "qwen2")
    hf = "lightning_rlvr.engines.hf.HFGenerateEngine"
    run_cli("fit", *fit_args(policy), "--model.engine", hf, root=tmp_path)
    said = settings(capsys.readouterr().err)
    assert "model.engine" not in said  # chosen by the config: nothing to say
    assert (
        said["prompts"]
        == "prompts: the tokenizer's chat template (plain instead: model.prompt_format.chat: never)"
    )


def test_configs_leave_the_engine_to_the_default():
    """The quickstarts name no engine: the default picks the fast one for their Llama policies."""
    import yaml

    for config in (QUICKSTART, TINY, QUICKSTART.replace("quickstart.yaml", "quickstart_real.yaml")):
        model = yaml.safe_load(open(config)).get("model", {})
        assert "engine" not in model, config
