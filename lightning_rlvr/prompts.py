"""How a task's prompt text becomes the string a model is conditioned on. Layer: ``prompts`` (imports nothing
of the package).

Instruction-tuned models expect their chat template; base models (and the
tiny built-in tokenizer) expect plain text. ``PromptFormat.render`` uses the
tokenizer's chat template, with the generation prompt appended, when the
tokenizer has one and ``chat`` allows it, and a plain ``template`` otherwise.

Privileged contexts (a teacher shown a verified peer, hindsight, the reference answer) are rendered
the same way: the method fills its template into the text of the *user* turn (``fill``), and the
same ``render`` wraps it, so the privileged text never lands inside the assistant turn and the
completion follows the assistant header exactly as it followed the student's prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

_FIELD = re.compile(r"\{([a-z_]+)\}")


def fill(template: str, **fields: str) -> str:
    """``template`` with each ``{name}`` of ``fields`` replaced by its text; any other brace is literal.

    Unlike ``str.format``, braces in the values or in the template's own text (``\\boxed{}``) are
    kept as they are, and a placeholder not in ``fields`` is left untouched.
    """
    return _FIELD.sub(lambda m: fields[m.group(1)] if m.group(1) in fields else m.group(0), template)


@dataclass
class PromptFormat:
    """Chat template or plain template for each problem's prompt.

    Args:
        chat: ``auto`` uses the tokenizer's chat template when it has one; ``always`` requires one
            (an error otherwise); ``never`` always uses ``template``.
        system: optional system message (chat) or a line placed before the prompt (plain).
        template: the plain format (the literal ``{prompt}`` is replaced; other braces are kept, so
            ``"{prompt} Put the final answer in \\boxed{}."`` works); also applied to the user message
            before the chat template.
    """

    chat: Literal["auto", "always", "never"] = "auto"
    system: str | None = None
    template: str = "{prompt}"

    def __post_init__(self) -> None:
        if self.chat not in ("auto", "always", "never"):
            raise ValueError(f"chat must be 'auto', 'always' or 'never', not {self.chat!r}")
        if "{prompt}" not in self.template:
            raise ValueError("template must contain '{prompt}'")

    def uses_chat(self, tokenizer) -> bool:
        has_template = bool(getattr(tokenizer, "chat_template", None))
        if self.chat == "always" and not has_template:
            raise ValueError("PromptFormat(chat='always') but the tokenizer has no chat_template")
        return self.chat != "never" and has_template

    def describe(self, tokenizer) -> str:
        """One line: which layout prompts take for ``tokenizer`` and how to choose the other."""
        if self.uses_chat(tokenizer):
            return "prompts: the tokenizer's chat template (plain instead: model.prompt_format.chat: never)"
        why = (
            "model.prompt_format.chat is never"
            if self.chat == "never"
            else "the tokenizer has no chat template"
        )
        return (
            f"prompts: plain layout {self.template!r}, no chat template ({why}); to choose: "
            "model.prompt_format (chat: always requires a template, template and system set the plain text)"
        )

    def render(self, tokenizer, text: str) -> str:
        """The string to tokenize for a problem whose prompt is ``text``."""
        user = self.template.replace("{prompt}", text)
        if not self.uses_chat(tokenizer):
            return f"{self.system}\n{user}" if self.system else user
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": user})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
