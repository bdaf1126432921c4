"""``lightning-rlvr export``: the Hugging Face directory reproduces the checkpoint's greedy outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lightning_rlvr.cli import main as cli_main
from lightning_rlvr.export import load_module
from lightning_rlvr.export import main as export_main
from tests.conftest import QUICKSTART, REPO, TINY

PROMPTS = ["Q 3+4=", "Q 9+9=", "Q 1+0=", "Q 7+2="]


def greedy(model, tokenizer, prompts=PROMPTS) -> torch.Tensor:
    enc = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(
            **enc, do_sample=False, max_new_tokens=10, pad_token_id=tokenizer.pad_token_id, use_cache=True
        )
    return out[:, enc.input_ids.shape[1] :]  # [B, T]


@pytest.fixture(scope="module")
def lora_checkpoint(tmp_path_factory) -> Path:
    """A 2-step LoRA run whose adapters are then made large, so a dropped adapter would show."""
    from lightning_rlvr.cli import run

    root = tmp_path_factory.mktemp("lora_run")
    lora = str(REPO / "configs" / "peft" / "lora.yaml")
    fit = run(
        [
            "fit",
            "--config",
            QUICKSTART,
            "--config",
            TINY,
            "--config",
            lora,
            "--trainer.default_root_dir",
            str(root),
        ]
    )
    ckpt = torch.load(fit.trainer.checkpoint_callback.last_model_path, weights_only=True)
    gen = torch.Generator().manual_seed(0)
    for name, value in ckpt["state_dict"].items():
        if "lora_B" in name:
            value.add_(torch.randn(value.shape, generator=gen) * 0.5)
    path = root / "perturbed.ckpt"
    torch.save(ckpt, path)
    return path


def test_both_lora_modes_load_in_transformers_and_match_the_checkpoint(lora_checkpoint, tmp_path):
    module = load_module(str(lora_checkpoint))
    expected = greedy(module.model, module.tokenizer)
    with module.model.disable_adapter():
        base_only = greedy(module.model, module.tokenizer)
    assert not torch.equal(expected, base_only)  # the adapters matter: dropping them would be caught

    cli_main(["export", "--ckpt_path", str(lora_checkpoint), "--out", str(tmp_path / "merged")])
    export_main(
        ["--ckpt_path", str(lora_checkpoint), "--out", str(tmp_path / "adapter"), "--lora", "adapter"]
    )
    merged_dir, adapter_dir = tmp_path / "merged", tmp_path / "adapter" / "adapter"
    assert not (merged_dir / "adapter_config.json").exists()  # a plain model
    adapter_config = json.loads((adapter_dir / "adapter_config.json").read_text())
    assert Path(adapter_config["base_model_name_or_path"]) == (tmp_path / "adapter").resolve()

    for directory in (merged_dir, adapter_dir):
        model = AutoModelForCausalLM.from_pretrained(directory).eval()
        tokenizer = AutoTokenizer.from_pretrained(directory)
        assert tokenizer.padding_side == "left"
        assert torch.equal(greedy(model, tokenizer), expected), directory
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "adapter").eval()  # the base model alone
    assert torch.equal(greedy(base, AutoTokenizer.from_pretrained(tmp_path / "adapter")), base_only)


def test_export_errors_are_one_line(lora_checkpoint, tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("taken")
    (tmp_path / "bad.ckpt").write_bytes(b"not a checkpoint")
    cases = [
        (["--ckpt_path", str(tmp_path / "missing.ckpt"), "--out", str(tmp_path / "o1")], "no such file"),
        (["--ckpt_path", str(tmp_path / "bad.ckpt"), "--out", str(tmp_path / "o2")], "not a checkpoint file"),
        (["--ckpt_path", str(lora_checkpoint), "--out", str(tmp_path / "full")], "not empty"),
    ]
    for args, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            cli_main(["export", *args])
        assert exit_info.value.code == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("lightning-rlvr: error: ") and message in lines[0]
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_the_tiny_quickstart_model_is_prompted_through_its_chat_template(lora_checkpoint, tmp_path):
    """No undocumented "Q " prefix: apply_chat_template of the question gives the training prompt."""
    module = load_module(str(lora_checkpoint))
    export_main(["--ckpt_path", str(lora_checkpoint), "--out", str(tmp_path / "out")])
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    messages = [{"role": "user", "content": "3+4="}]
    for generation_prompt in (True, False):
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )
        assert text == "Q 3+4="
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    chat = [
        tokenizer.apply_chat_template([{"role": "user", "content": p[2:]}], tokenize=False) for p in PROMPTS
    ]
    assert torch.equal(greedy(model, tokenizer, chat), greedy(module.model, module.tokenizer))
    files = [f for f in (tmp_path / "out").rglob("*") if f.is_file()]
    assert files and all(f.stat().st_mode & 0o044 == 0o044 for f in files)  # not 0600
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_lora_checkpoints_hold_the_adapters_not_the_frozen_base(tmp_path):
    """Without a warm start the base is what model.policy loads: the checkpoint leaves it out, and resume,
    test and export take it from the policy again."""
    from lightning_rlvr.cli import run

    lora = str(REPO / "configs" / "peft" / "lora.yaml")
    args = [
        "--config",
        QUICKSTART,
        "--config",
        TINY,
        "--config",
        lora,
        "--model.warm_start",
        "null",
        "--trainer.default_root_dir",
        str(tmp_path),
    ]
    fit = run(["fit", *args])
    last = fit.trainer.checkpoint_callback.last_model_path
    state = torch.load(last, weights_only=True)
    assert state["state_dict"] and all("lora_" in k for k in state["state_dict"] if k.startswith("model."))
    assert "base" in state["rlvr"]
    module = load_module(last)
    full = module.model.state_dict()
    assert any("lora_" not in k for k in full)
    export_main(["--ckpt_path", last, "--out", str(tmp_path / "out")])
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert torch.equal(greedy(exported, module.tokenizer), greedy(module.model, module.tokenizer))
    resumed = run(["fit", *args, "--trainer.max_steps", "3", "--ckpt_path", last])
    assert resumed.model.rl_step == 3
