"""Any GGUF file or Hugging Face folder of a supported architecture is a policy: tiny random Llama, Qwen2
(q/k/v biases), Gemma 2 and Gemma 3 models, written both ways, load through ``PretrainedPolicy`` as the
model they were written from, fit a step, export and reload; other architectures are one line."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, ViTConfig

from lightning_rlvr.core.errors import RLVRError
from lightning_rlvr.export import load_module
from lightning_rlvr.export import main as export_main
from lightning_rlvr.models import PretrainedPolicy
from tests.tiny_architectures import ARCHS, byte_tokenizer, fit_args, tiny_model, write_gguf

QUESTION = [{"role": "user", "content": "the answer is 3+4"}]


def written(tmp_path, arch: str, form: str, chat: bool = True):
    """The source model, and the path of it written as ``form`` (``hf`` folder or ``gguf`` file)."""
    tokenizer = byte_tokenizer(chat)
    model = tiny_model(arch, tokenizer)
    if form == "hf":
        model.save_pretrained(tmp_path / arch)
        tokenizer.save_pretrained(tmp_path / arch)
        return model, tmp_path / arch
    return model, write_gguf(tmp_path / f"{arch}.gguf", model, tokenizer)


def greedy(model, tokenizer) -> torch.Tensor:
    text = tokenizer.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tokenizer(text, add_special_tokens=False).input_ids])
    with torch.no_grad():
        out = model.generate(ids, do_sample=False, max_new_tokens=8, pad_token_id=tokenizer.pad_token_id)
    return out[0, ids.shape[1] :]


@pytest.mark.parametrize("form", ["hf", "gguf"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_a_model_users_bring_loads_as_written_fits_exports_and_reloads(arch, form, tmp_path, run_cli):
    source, path = written(tmp_path, arch, form)
    model, tokenizer = PretrainedPolicy(str(path)).load()
    assert model.config.model_type == ARCHS[arch][0]
    text = tokenizer.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tokenizer(text, add_special_tokens=False).input_ids])
    assert ids[0].tolist() == byte_tokenizer()(text, add_special_tokens=False).input_ids
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(ids).logits, source(ids).logits)  # the model written

    fit = run_cli("fit", *fit_args(path), root=tmp_path / "run")
    assert fit.model.rl_step == 1
    ckpt = fit.trainer.checkpoint_callback.last_model_path
    export_main(["--ckpt_path", ckpt, "--out", str(tmp_path / "out")])
    module = load_module(ckpt)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert type(reloaded) is type(source)
    assert torch.equal(
        greedy(reloaded, AutoTokenizer.from_pretrained(tmp_path / "out")),
        greedy(module.model, module.tokenizer),
    )


def test_a_model_without_a_chat_template_trains_in_the_plain_layout_and_says_so(tmp_path, run_cli, capsys):
    _, path = written(tmp_path, "gemma3", "gguf", chat=False)
    run_cli("fit", *fit_args(path), root=tmp_path / "run")
    lines = [line for line in capsys.readouterr().err.splitlines() if "prompts:" in line]
    assert len(lines) == 1
    assert "plain layout" in lines[0] and "no chat template" in lines[0] and "model.prompt_format" in lines[0]


def test_an_unsupported_gguf_architecture_is_one_line_naming_the_supported(tmp_path):
    import gguf

    file = tmp_path / "neox.gguf"
    writer = gguf.GGUFWriter(str(file), "gptneox")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 4).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(RLVRError) as err:
        PretrainedPolicy(str(file)).load()
    message = str(err.value)
    assert "\n" not in message and "'gptneox'" in message
    assert all(arch in message for arch in ("llama", "qwen2", "gemma2", "gemma3"))


@pytest.mark.parametrize("model_type", ["vit", "no_such_architecture"])
def test_an_unsupported_folder_is_one_line_naming_the_supported(tmp_path, model_type):
    ViTConfig(hidden_size=4, num_hidden_layers=1, num_attention_heads=1).save_pretrained(tmp_path)
    config = (tmp_path / "config.json").read_text()  # an image model, or a model_type nobody knows
    (tmp_path / "config.json").write_text(config.replace('"vit"', f'"{model_type}"'))
    with pytest.raises(RLVRError) as err:
        PretrainedPolicy(str(tmp_path), local_files_only=True).load()
    message = str(err.value)
    assert "\n" not in message and model_type in message
    assert "supported" in message and "llama, qwen2, gemma2, gemma3_text" in message
