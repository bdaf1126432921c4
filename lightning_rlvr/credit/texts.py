"""A credit method's text settings (templates, delimiters, cues), each resolved from the roles it reads.

Layer: credit (imports ``core`` only).

Methods that put text in front of the policy (SC-GRPO's peer template, HSD's, OPSD's teacher prompt,
HP-RLVR's hindsight, RREDCoT's cue) or cut completions at text (step delimiters) need words the
policy's tokenizer can spell and that fit the task's own format. Those are facts of the task and its
vocabulary, not of the method: tasks, environments and tokenizers provide texts by ROLE (what the text
is for, ``lightning_rlvr/core/text_roles.py``), and a method maps each of its settings to the roles it
reads (``text_roles``), first provided first. A method file (``configs/method/*.yaml``) leaves the
settings unset (None) and each is resolved when the method first scores a rollout, in this order:

1. the value given to the constructor (YAML or ``--model.credit.init_args.<name>``);
2. with the plain layout (no prompt format: the prompt as is), the task's text for one of the setting's
   roles (``Task.role_texts``) -- e.g. a text game's episode layout (``Environment``);
3. with the plain layout, the vocabulary's (``tokenizer.role_texts``) -- e.g. the tiny tokenizer's 24
   symbols (``models.TINY_ROLE_TEXTS``: ``;``-separated templates);
4. the method's default (``text_defaults``: English, for real tokenizers; with a prompt format the
   privileged text goes in the user turn and is re-rendered, ``lightning_rlvr/prompts.py``).

Whatever is chosen is then checked against the tokenizer: a text it can only encode with its unknown
token stops the run with one line naming the setting, instead of a teacher that reads ``<unk>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..core.errors import RLVRError
from ..core.text_roles import provided_texts

PLACEHOLDER = re.compile(r"\{[A-Za-z_]+\}")  # a template's field: {prompt}, {answer}, ...


class TextSettings:
    """Mixin for credit assigners with text settings (see the module docstring).

    Subclasses set ``text_roles`` (setting -> the roles it is read from, first provided first; empty:
    the default only) and ``text_defaults`` (setting -> the method's own default), keep each setting's
    constructor value (None = unset) in the attribute of its name, and read the resolved values with
    ``self.texts(scorer)``.
    """

    text_roles: dict[str, tuple[str, ...]] = {}
    text_defaults: dict[str, Any] = {}

    @classmethod
    def settings_from(cls, role_texts: Mapping[str, Any]) -> dict[str, Any]:
        """The settings that ``role_texts`` (a source's texts by role) gives this method."""
        out = {}
        for name, roles in cls.text_roles.items():
            found = [role_texts[r] for r in roles if r in role_texts]
            if found:
                out[name] = found[0]
        return out

    def texts(self, scorer) -> dict[str, Any]:
        """Every text setting resolved for this scorer's task, layout and tokenizer (cached per run)."""
        task, plain = getattr(scorer, "task", None), getattr(scorer, "render", None) is None
        key = (id(task), plain, id(scorer.tokenizer))
        cache = self.__dict__.setdefault("_texts_cache", {})
        if key not in cache:
            sources = [task, scorer.tokenizer] if plain else []  # the task's texts, then the vocabulary's
            found = [self.settings_from(provided_texts(s)) for s in sources]
            resolved = {}
            for name, default in self.text_defaults.items():
                given = getattr(self, name, None)
                resolved[name] = (
                    given if given is not None else next((f[name] for f in found if name in f), default)
                )
            self.check_texts(resolved)
            check_encodable(scorer.tokenizer, type(self).__name__, resolved, self.literal_texts(resolved))
            cache[key] = resolved
        return cache[key]

    def check_texts(self, texts: dict[str, Any]) -> None:
        """Validate the resolved settings (e.g. a template's placeholders); raise ``ValueError``."""

    def literal_texts(self, texts: dict[str, Any]) -> dict[str, list[str]]:
        """The literal text of each setting that the tokenizer must encode (default: every string, its
        ``{placeholder}`` fields left out)."""
        out: dict[str, list[str]] = {}
        for name, value in texts.items():
            values = value if isinstance(value, (list, tuple)) else [value]
            out[name] = [p for v in values if isinstance(v, str) for p in PLACEHOLDER.split(v) if p]
        return out


def check_encodable(tokenizer, method: str, texts: dict[str, Any], literals: dict[str, list[str]]) -> None:
    """One ``RLVRError`` line when a setting's text encodes to the tokenizer's unknown token."""
    unk = getattr(tokenizer, "unk_token_id", None)
    if tokenizer is None or unk is None:
        return
    for name, pieces in literals.items():
        for piece in pieces:
            if unk in tokenizer(piece, add_special_tokens=False)["input_ids"]:
                raise RLVRError(
                    f"{method}: {name}={texts[name]!r} has text this tokenizer can only encode as its "
                    f"unknown token ({piece!r}); set model.credit.init_args.{name} in this task's "
                    "vocabulary, or give the task its own text for the role it reads (Task.role_texts, "
                    "docs/privileged_contexts.md)"
                )
