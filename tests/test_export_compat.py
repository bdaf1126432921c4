"""An exported checkpoint is the same model in plain transformers: the installed version and the oldest the
project supports (pyproject's ``transformers>=``), each in a subprocess that never imports the project.

The oldest version is installed once with ``pip install --target`` under ``LIGHTNING_RLVR_TEST_ENVS``
(default ``~/.cache/lightning_rlvr_test_envs``, reused by later runs) and put first on ``PYTHONPATH``,
reusing this environment's torch. A failed install fails the test, with pip's last line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_rlvr.export import load_module
from lightning_rlvr.export import main as export_main
from tests.conftest import REPO
from tests.tiny_architectures import fit_args, save_hf

# the oldest transformers line pyproject allows, at its last patch, with the versions it was released with
OLDEST = ["transformers==4.46.3", "tokenizers==0.20.3", "huggingface_hub==0.26.5", "safetensors==0.4.5"]
QUESTIONS = ["3+4=", "9+9=", "1+0=", "7+2=", "the answer is"]
NEW_TOKENS = 12

# Run by a bare interpreter: the folder's greedy tokens and last-position logits for each question.
READER = """
import json, sys, torch, transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, questions, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder).eval()
rows = []
for q in questions:
    chat = [{"role": "user", "content": q}]
    text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tok(text, add_special_tokens=False).input_ids])
    with torch.no_grad():
        out = model.generate(ids, do_sample=False, max_new_tokens=new, pad_token_id=tok.pad_token_id)
        logits = model(ids).logits[0, -1]
    greedy = out[0, ids.shape[1]:].tolist()
    rows.append({"prompt": ids[0].tolist(), "greedy": greedy, "logits": logits.tolist()})
project = "lightning_rlvr" in sys.modules
print(json.dumps({"version": transformers.__version__, "project": project, "rows": rows}))
"""


def minimum_transformers() -> str:
    """The lower bound pyproject.toml declares for transformers (``4.46``)."""
    return re.search(r'"transformers>=([0-9.]+)"', (REPO / "pyproject.toml").read_text()).group(1)


@pytest.fixture(scope="session")
def oldest_transformers() -> Path:
    """A ``--target`` folder holding the oldest supported transformers (installed once, then reused)."""
    assert OLDEST[0].startswith(f"transformers=={minimum_transformers()}."), "OLDEST must follow pyproject"
    root = Path(
        os.environ.get("LIGHTNING_RLVR_TEST_ENVS", Path.home() / ".cache" / "lightning_rlvr_test_envs")
    )
    target = root / "-".join(spec.replace("==", "") for spec in OLDEST)
    if (target / "INSTALLED").is_file():
        return target
    tmp = root / f"{target.name}.tmp{os.getpid()}"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(tmp), *OLDEST]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.fail(f"could not install {' '.join(OLDEST)} with pip (exit {done.returncode}): {last}")
    (tmp / "INSTALLED").write_text(" ".join(OLDEST))
    tmp.replace(target)
    return target


def read_in_plain_transformers(folder: Path, pythonpath: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"OMP_NUM_THREADS": "1", **({"PYTHONPATH": pythonpath} if pythonpath else {})})
    args = [sys.executable, "-c", READER, str(folder), json.dumps(QUESTIONS), str(NEW_TOKENS)]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=folder, timeout=300)
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1]
    return json.loads(done.stdout.strip().splitlines()[-1])


def project_rows(ckpt: str) -> list[dict]:
    """What the project's own module makes of each question: prompt ids, greedy ids, last logits."""
    module = load_module(ckpt)
    rows = []
    for q in QUESTIONS:
        text = module.render(q) if module.render else q
        ids = torch.tensor([module.tokenizer(text, add_special_tokens=False).input_ids])
        with torch.no_grad():
            pad = module.tokenizer.pad_token_id
            out = module.model.generate(ids, do_sample=False, max_new_tokens=NEW_TOKENS, pad_token_id=pad)
            logits = module.model(ids).logits[0, -1]
        rows.append({"prompt": ids[0].tolist(), "greedy": out[0, ids.shape[1] :].tolist(), "logits": logits})
    return rows


def test_an_export_is_the_same_model_in_the_installed_and_the_oldest_transformers(
    run_cli, tmp_path, oldest_transformers
):
    """A Llama with a non-default rope base (SmolLM2's 100000): a reader that falls back to 10000, or
    cannot build the tokenizer, gives other logits or none."""
    import transformers

    policy = save_hf(tmp_path / "policy", "llama")
    fit = run_cli("fit", *fit_args(policy))
    ckpt = fit.trainer.checkpoint_callback.last_model_path
    export_main(["--ckpt_path", ckpt, "--out", str(tmp_path / "out")])
    expected = project_rows(ckpt)
    for pythonpath, version in [
        (None, transformers.__version__),
        (str(oldest_transformers), OLDEST[0].split("==")[1]),
    ]:
        got = read_in_plain_transformers(tmp_path / "out", pythonpath)
        assert (got["version"], got["project"]) == (version, False)
        for want, row in zip(expected, got["rows"], strict=True):
            assert row["prompt"] == want["prompt"], version
            assert row["greedy"] == want["greedy"], version
            torch.testing.assert_close(torch.tensor(row["logits"]), want["logits"], rtol=1e-4, atol=1e-4)


def test_a_rope_form_older_versions_cannot_read_is_refused_in_one_line():
    from lightning_rlvr.core.errors import RLVRError
    from lightning_rlvr.export import legacy_rope

    assert legacy_rope({"rope_theta": 5.0, "rope_type": "default"}) == {
        "rope_theta": 5.0,
        "rope_scaling": None,
    }
    scaled = {"rope_theta": 5.0, "rope_type": "llama3", "factor": 8.0}
    assert legacy_rope(scaled)["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0}
    per_layer = {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}}
    assert legacy_rope(per_layer) == {"rope_theta": 1e6, "rope_local_base_freq": 1e4, "rope_scaling": None}
    for odd in ({"rope_type": "default"}, {"chunked_attention": {"rope_theta": 1.0}}):
        with pytest.raises(RLVRError, match="no form transformers 4.x reads") as err:
            legacy_rope(odd)
        assert "\n" not in str(err.value)
