"""One value per figure: finds a figure the README and docs state with two different values.

Layer: experiments (reads README.md and docs/*.md as text; imports nothing of the package). A figure is
a method's difference from GRPO with its interval ('SC-GRPO -3.8 [-7.8, +0.1]', attributed to the
method named last before it) or one of ``KEY_FIGURES`` (the papers' claims, the oracle's ceiling). The
same label with two values on the pages is a conflict. Run it with
``python -m lightning_rlvr.experiments.findings --conflicts``, which hands it the method names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

DIFFERENCE = re.compile(r"([+-]\d+\.\d)\*{0,2} \[([+-]\d+\.\d), ([+-]\d+\.\d)\]")
KEY_FIGURES = {  # a figure stated in prose: its label, the pattern of its value, a word near it
    "HP-RLVR's paper speed-up": (
        re.compile(r"(?:paper|claim)[^.\n]{0,30}?(\d\.\d+(?:-\d\.\d+)?)x (?:faster|speed)"),
        "HP-RLVR",
    ),
    "SC-GRPO's paper gain": (re.compile(r"\+(\d+\.\d)%"), "SC-GRPO"),
    "SHEAR's paper gain": (re.compile(r"(?:paper|claim)[^.\n]{0,10}?\+(\d\.\d) points"), "SHEAR"),
    "the oracle's ceiling at M = 16": (
        re.compile(
            r"(?:ceiling (?:is|of)(?: about)?\s+(0\.\d\d))|(?:(0\.\d\d)(?: \[[^]]*\])? \(the ceiling\))"
        ),
        "M = 16",
    ),
}
CONTEXT = 120  # characters before a difference searched for the method it belongs to


def column_header(text: str, at: int) -> str:
    """The header of the markdown table column that position ``at`` lies in ('' outside a table)."""
    start = text.rfind("\n", 0, at) + 1
    line = text[start : text.find("\n", at) if "\n" in text[at:] else len(text)]
    if not line.startswith("|"):
        return ""
    header, lines = line, text[:start].splitlines()
    while lines and lines[-1].startswith("|"):  # up to the table's first line
        header = lines.pop()
    column = text[start:at].count("|") - 1
    cells = [c.strip() for c in header.strip("|").split("|")]
    return cells[column] if 0 <= column < len(cells) else ""


def statements(text: str, names: Iterable[str], settings: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(label, value) of every key figure in ``text``: a difference from GRPO as 'METHOD d' with its
    interval, METHOD the last of ``names`` (the methods' display names) before it, and ``KEY_FIGURES``.
    A difference on a named setting (one of ``settings``: its table column's header, or the last setting
    named between the method and it) is labelled with it, so two settings' differences that round alike
    are two figures; a difference called 'paired' is a statistic of its own."""
    out = []
    names = sorted(names, key=len, reverse=True)
    settings = sorted(settings, key=len, reverse=True)
    for m in DIFFERENCE.finditer(text):
        before = text[max(0, m.start() - CONTEXT) : m.start()]
        found = [(before.rfind(n), n) for n in names if n in before]
        if not found:
            continue
        at, name = max(found)
        header = column_header(text, m.start())
        after_name = before[at + len(name) :]
        named = [(after_name.rfind(s), s) for s in settings if s in after_name]
        setting = header if header in settings else max(named)[1] if named else ""
        kind = " (paired)" if "paired" in before[-40:] else ""
        where = f" on {setting}" if setting else ""
        out.append((f"{name}{where} {m.group(1)}{kind}", f"[{m.group(2)}, {m.group(3)}]"))
    for label, (pattern, word) in KEY_FIGURES.items():
        for m in pattern.finditer(text):
            if word in text[max(0, m.start() - 3 * CONTEXT) : m.end() + CONTEXT]:
                out.append((label, next(g for g in m.groups() if g)))
    return out


def conflicts(
    root: Path, names: Iterable[str], pages: Sequence[str] | None = None, settings: Iterable[str] = ()
) -> list[str]:
    """Figures stated with two values across README.md and docs/*.md: 'label: value (page), ...'."""
    names, settings = list(names), list(settings)
    paths = pages or ["README.md", *sorted(str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))]
    seen: dict[str, dict[str, list[str]]] = {}
    for page in paths:
        for label, value in statements((root / page).read_text(), names, settings):
            seen.setdefault(label, {}).setdefault(value, []).append(page)
    return [
        f"{label}: " + "; ".join(f"{v} ({', '.join(sorted(set(p)))})" for v, p in values.items())
        for label, values in seen.items()
        if len(values) > 1
    ]
