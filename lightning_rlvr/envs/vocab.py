"""A word-level tokenizer built from an environment's own words, and the in-code model sized for episodes.

The arithmetic tokenizer (``lightning_rlvr.models``) knows 24 symbols; a text game needs its words.
``build_word_tokenizer`` splits text into pieces (a word with its leading space, one character of
anything else, a newline, a space) and gives a token to every piece of the environment's texts
(observations, commands, object names: ``Environment.vocabulary_texts``; each word with and without
its leading space) plus every printable ASCII
character with and without a leading space, so any number or symbol can still be spelled. A word never
seen becomes ``<unk>``. Decoding joins pieces with no separator, so decode(encode(text)) == text for
every text made of known pieces.

``TextPolicy`` is ``TinyPolicy`` for an environment: the same Llama-style model, with this tokenizer
and more positions (an episode's context holds every turn's action and observation).
"""

from __future__ import annotations

import copy
import json
import re
import string
from collections import Counter
from collections.abc import Iterable
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from ..core.errors import RLVRError
from ..models.policies import SPECIAL_TOKENS, PolicySource, small_llama
from .base import Environment

PIECE = r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]|\n| "  # a word, a digit, a symbol (each with its space)
_PIECE = re.compile(PIECE)
ALPHABET = [c for c in string.printable if c not in string.whitespace]


def word_vocabulary(texts: Iterable[str], max_size: int = 4096, min_count: int = 1) -> list[str]:
    """Special tokens, then the base alphabet, then the texts' pieces by frequency (ties: alphabetical).

    Every word is counted with and without its leading space, so a word seen in one position is
    known in the other.
    """
    base = list(SPECIAL_TOKENS) + ["\n", " "] + ALPHABET + [" " + c for c in ALPHABET]
    counts: Counter[str] = Counter()
    for piece in (p for t in texts for p in _PIECE.findall(t)):
        word = piece.lstrip(" ")
        # A word gets both forms: "close fridge" starts a command, ", close oven" continues a list.
        counts.update([word, " " + word] if word.isalpha() else [piece])
    seen = set(base)
    words = sorted(
        (p for p, c in counts.items() if c >= min_count and p not in seen), key=lambda p: (-counts[p], p)
    )
    return base + words[: max(0, max_size - len(base))]


def build_word_tokenizer(vocab: list[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over ``vocab`` (see ``word_vocabulary``), left padding for generation."""
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
        clean_up_tokenization_spaces=False,  # decode must give back the text exactly
    )


def tokenizer_for(env: Environment, max_size: int = 4096, limit: int = 64) -> PreTrainedTokenizerFast:
    """The word tokenizer of ``env``'s training texts (its first ``limit`` train problems)."""
    return build_word_tokenizer(word_vocabulary(env.vocabulary_texts("train", limit), max_size))


class TextPolicy(PolicySource):
    """A Llama-style model built in code with a tokenizer of ``env``'s words.

    Args:
        env: the environment whose texts give the vocabulary (its ``train`` split only); None: the
            task the module trains on (``for_task``), so a config names the environment once.
        layers: transformer blocks.
        hidden: model width.
        heads: attention heads.
        intermediate: MLP width.
        max_positions: longest episode context (prompt plus every turn's action and observation).
        max_vocab: most tokens (special tokens and the base alphabet included).
        vocab_games: train problems whose texts are read for the vocabulary.
        seed: initialisation seed.
    """

    def __init__(
        self,
        env: Environment | None = None,
        layers: int = 2,
        hidden: int = 128,
        heads: int = 4,
        intermediate: int = 512,
        max_positions: int = 2048,
        max_vocab: int = 4096,
        vocab_games: int = 64,
        seed: int = 0,
    ) -> None:
        self.env = env
        self.layers = layers
        self.hidden = hidden
        self.heads = heads
        self.intermediate = intermediate
        self.max_positions = max_positions
        self.max_vocab = max_vocab
        self.vocab_games = vocab_games
        self.seed = seed

    def for_task(self, task) -> TextPolicy:
        if self.env is not None:
            return self
        if not isinstance(task, Environment):
            raise RLVRError(f"TextPolicy without env needs an environment task, got {type(task).__name__}")
        twin = copy.copy(self)
        twin.env = task
        return twin

    def load(self) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
        if self.env is None:
            raise RLVRError("TextPolicy has no env: pass one, or let RLVRModule bind its task (for_task)")
        tokenizer = tokenizer_for(self.env, self.max_vocab, self.vocab_games)
        return small_llama(self, tokenizer), tokenizer

    def cache_key(self) -> dict[str, Any]:
        env = {k: v for k, v in vars(self.env).items() if not k.startswith("_")}
        fields = {k: v for k, v in vars(self).items() if k != "env"}
        blob = json.dumps(env, sort_keys=True, default=str)  # the vocabulary is a function of these
        return {"class": type(self).__name__, "env": type(self.env).__name__, "env_fields": blob, **fields}
