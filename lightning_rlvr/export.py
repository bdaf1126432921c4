"""``lightning-rlvr export --ckpt_path X --out DIR``: a trained policy as a Hugging Face directory.

The module (policy, LoRA, task) is rebuilt from the checkpoint alone, as ``test``
does, and the policy is written with ``save_pretrained`` next to its tokenizer, so
``AutoModelForCausalLM.from_pretrained(DIR)`` and vLLM (``vllm serve DIR``) load it.

A LoRA run (``model.lora``) is written one of two ways (``--lora``):

- ``merge`` (default): the adapters are folded into the weights; DIR is a plain model.
- ``adapter``: DIR holds the base model the adapters were trained on (the warm start
  trains it before LoRA is applied, so it is not the original hub model) and
  ``DIR/adapter`` the ``peft`` adapter, whose ``base_model_name_or_path`` points at DIR
  (an absolute path: move both together, or edit it). Load with
  ``AutoModelForCausalLM.from_pretrained("DIR/adapter")`` (``peft`` installed), or serve
  with ``vllm serve DIR --enable-lora --lora-modules rlvr=DIR/adapter``.

The tokenizer carries a chat template, so the exported model is prompted the way it was trained: a
tokenizer with one keeps it (the run rendered its prompts through it); one without (the in-code tiny
tokenizer) gets a template that wraps the user message as training did (``Task.prompt_template`` and
the module's prompt format: the addition task's ``Q 3+4=`` is ``apply_chat_template`` of ``3+4=``).
DIR is written atomically (a temporary sibling renamed into place) with the usual file modes.

Every transformers the project supports (``>= 4.46``) reads DIR as the same model (``legacy_keys``):
``save_pretrained`` of transformers 5 writes ``rope_parameters`` and ``dtype`` where earlier versions read
``rope_theta`` / ``rope_scaling`` and ``torch_dtype`` (a 4.x reader would silently use its default rope
base), names the tokenizer ``TokenizersBackend`` (unknown before 5) and keeps the chat template in
``chat_template.jinja`` (read since 4.50). Both spellings are written; a ``rope_parameters`` of a form
older versions cannot express is refused with one line.
A LoRA checkpoint without its frozen base (``checkpoint_state.py``) is completed from ``model.policy``,
which loads the same base again (a GGUF's cached float copy, or the hub directory).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .core.errors import RLVRError, exit_with_one_line, user_error
from .core.files import atomic_dir, usual_modes

ADAPTER_DIR = "adapter"


def load_module(ckpt_path: str):
    """The ``RLVRModule`` of a checkpoint, on CPU in eval mode (LoRA adapters restored)."""
    from .checkpoint_files import read_checkpoint
    from .module import RLVRModule

    read_checkpoint(ckpt_path)  # one clear error for a missing, truncated or foreign file
    return RLVRModule.load_from_checkpoint(ckpt_path, map_location="cpu", weights_only=True).eval()


def export(ckpt_path: str, out: str, lora: str = "merge") -> Path:
    """Write the checkpoint's policy and tokenizer to ``out``; returns the directory to load."""
    if lora not in ("merge", "adapter"):
        raise RLVRError(f"--lora must be 'merge' or 'adapter', got {lora!r}")
    out_dir = Path(out)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise RLVRError(f"--out {out}: the directory is not empty; give a new or empty directory")
    module = load_module(ckpt_path)
    model, tokenizer = module.model, module.tokenizer
    is_peft = hasattr(model, "peft_config")
    if lora == "adapter" and not is_peft:
        raise RLVRError(
            f"--lora adapter: {ckpt_path} has no LoRA adapters (model.lora was not set); use --lora merge"
        )
    template = baked_chat_template(module)
    if template is not None:
        tokenizer.chat_template = template
    with atomic_dir(out_dir) as tmp:
        if is_peft and lora == "adapter":
            adapter_dir = tmp / ADAPTER_DIR
            model.save_pretrained(adapter_dir)  # adapter weights + adapter_config.json only
            config_file = adapter_dir / "adapter_config.json"
            config = json.loads(config_file.read_text())
            config["base_model_name_or_path"] = str(out_dir.resolve())
            config_file.write_text(json.dumps(config, indent=2))
            model = model.unload()  # the base weights without adapters, unmerged
            tokenizer.save_pretrained(adapter_dir)
        elif is_peft:
            model = model.merge_and_unload()
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for folder in (tmp, tmp / ADAPTER_DIR):
            legacy_keys(folder)
        usual_modes(tmp)
    return out_dir / ADAPTER_DIR if is_peft and lora == "adapter" else out_dir


def legacy_keys(folder: Path) -> None:
    """Add to ``folder``'s config and tokenizer files the spellings transformers 4.46-4.57 read."""
    config_file, tokenizer_file = folder / "config.json", folder / "tokenizer_config.json"
    if config_file.is_file():
        config = json.loads(config_file.read_text())
        if config.get("dtype") is not None:
            config.setdefault("torch_dtype", config["dtype"])
        if isinstance(config.get("rope_parameters"), dict):
            config.update(
                {k: v for k, v in legacy_rope(config["rope_parameters"]).items() if k not in config}
            )
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if tokenizer_file.is_file():
        tok = json.loads(tokenizer_file.read_text())
        if (folder / "tokenizer.json").is_file():  # tokenizer.json alone, read alike by every version
            tok["tokenizer_class"] = "PreTrainedTokenizerFast"
        template = folder / "chat_template.jinja"
        if template.is_file():
            tok.setdefault("chat_template", template.read_text())
        if isinstance(tok.get("extra_special_tokens"), list):  # 4.48-4.57 read a dict there
            extra = tok.pop("extra_special_tokens")
            tok["additional_special_tokens"] = list(
                dict.fromkeys(tok.get("additional_special_tokens", []) + extra)
            )
        tokenizer_file.write_text(json.dumps(tok, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def legacy_rope(rope: dict) -> dict:
    """``rope_parameters`` as the top-level keys transformers 4.x reads (``rope_theta``, ``rope_scaling``,
    and Gemma 3's ``rope_local_base_freq`` for its per-layer-type form)."""
    out = {}
    if "rope_theta" not in rope and {"full_attention", "sliding_attention"} >= set(rope) and rope:
        if "sliding_attention" in rope:
            out["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
        rope = rope.get("full_attention", rope.get("sliding_attention"))
    if not isinstance(rope, dict) or "rope_theta" not in rope:
        raise RLVRError(
            f"export: config.json's rope_parameters {rope} has no form transformers 4.x reads; export with a "
            "transformers of the version that will load it, or write rope_theta/rope_scaling by hand"
        )
    out["rope_theta"] = rope["rope_theta"]
    if "partial_rotary_factor" in rope:
        out["partial_rotary_factor"] = rope["partial_rotary_factor"]
    scaling = {k: v for k, v in rope.items() if k not in ("rope_theta", "partial_rotary_factor")}
    out["rope_scaling"] = scaling if scaling.get("rope_type", "default") != "default" else None
    return out


def baked_chat_template(module) -> str | None:
    """A chat template rendering a user message as the run rendered a question (None: keep the tokenizer's
    own)."""
    if getattr(module.tokenizer, "chat_template", None):
        return None
    mark = "\x00question\x00"
    text = module.task.prompt_template().replace("{question}", mark)
    prefix, suffix = (module.render(text) if module.render else text).split(mark, 1)
    literal = lambda part: "{{ " + json.dumps(part) + " }}" if part else ""
    return (
        "{% for message in messages %}{% if message['role'] == 'user' %}"
        + literal(prefix)
        + "{{ message['content'] }}"
        + literal(suffix)
        + "{% endif %}{% endfor %}"
    )


def main(args: list[str] | None = None) -> None:
    """``lightning-rlvr export`` (also ``lightning-rlvr-export``); user errors are one line, exit 2."""
    parser = argparse.ArgumentParser(
        prog="lightning-rlvr export", description="Write a checkpoint's policy as a Hugging Face directory."
    )
    parser.add_argument("--ckpt_path", required=True, help="a .ckpt written by lightning-rlvr fit")
    parser.add_argument("--out", required=True, help="new or empty output directory")
    parser.add_argument(
        "--lora",
        choices=["merge", "adapter"],
        default="merge",
        help="LoRA runs: fold the adapters into the weights, or save them as a peft adapter in OUT/adapter",
    )
    parsed = parser.parse_args(args)
    try:
        path = export(parsed.ckpt_path, parsed.out, parsed.lora)
    except Exception as err:
        exit_with_one_line("lightning-rlvr", user_error(err))
        raise
    print(f"exported to {path}")


if __name__ == "__main__":
    main()
