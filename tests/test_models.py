"""Policies load like any Hugging Face model: save/load round trips, local paths, LoRA."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lightning_rlvr.models import TINY_VOCAB, PretrainedPolicy, TinyPolicy, apply_lora, build_tiny_tokenizer


def test_tiny_tokenizer_round_trips_text_and_disk(tmp_path):
    tok = build_tiny_tokenizer()
    text = "Q 347+285= 7+5+0=12;4+8+1=13;3+2+1=06; answer:632"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.unk_token_id not in ids
    assert len(tok) == len(TINY_VOCAB) == 24
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again(text, add_special_tokens=False)["input_ids"] == ids
    assert (again.pad_token_id, again.eos_token_id, again.padding_side) == (0, 2, "left")


def test_tiny_model_save_load_is_exact(tmp_path):
    model, tok = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64).load()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, loaded_tok = PretrainedPolicy(str(tmp_path), local_files_only=True).load()
    ids = torch.tensor([tok("Q 12+34=", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, loaded(ids).logits, rtol=0, atol=0)
    assert loaded_tok.padding_side == "left"
    assert loaded.training  # a policy trains: no "modules in eval mode" at the start of fit
    assert isinstance(AutoModelForCausalLM.from_pretrained(tmp_path), type(model))


def test_pretrained_policy_always_pads_on_the_left(tmp_path):
    """A tokenizer saved with right padding (most hub tokenizers) still generates from left-padded prompts."""
    model, tok = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64).load()
    tok.padding_side = "right"
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path).padding_side == "right"
    _, loaded_tok = PretrainedPolicy(str(tmp_path), local_files_only=True).load()
    assert loaded_tok.padding_side == "left"
    batch = loaded_tok(["Q 1+2=", "Q 12+34="], padding=True, add_special_tokens=False)["input_ids"]
    assert batch[0][0] == loaded_tok.pad_token_id and batch[0][-1] != loaded_tok.pad_token_id


def test_tiny_policy_init_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(5)
    before = torch.rand(1)
    torch.manual_seed(5)
    a, _ = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, seed=3).load()
    after = torch.rand(1)
    b, _ = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64, seed=3).load()
    assert before == after
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_lora_trains_only_adapters():
    model, _ = TinyPolicy(layers=1, hidden=32, heads=2, intermediate=64).load()
    peft_model = apply_lora(model, {"r": 4, "lora_alpha": 8})
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
