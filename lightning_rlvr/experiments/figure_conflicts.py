"""One value per figure: finds a figure the README and docs state with two different values.

Layer: experiments (reads README.md and docs/*.md as text; imports nothing of the package). A figure is
a method's difference from GRPO with its interval ('SC-GRPO -3.8 [-7.8, +0.1]') or one of
``KEY_FIGURES`` (the papers' claims, the oracle's ceiling). A difference is labelled by what it compares,
read from the page's structure: the method (its table row's first cell, else the last method named
before it in its list item or paragraph, else in the item's parents), the setting (its table column's
header, else the last setting named between the method and it, else in the table's lead or the item's
parents) and whether it is a paired statistic. The same label with two values on the pages is a
conflict. Run it with ``python -m lightning_rlvr.experiments.findings --conflicts``, which hands it the
names: each method's display name and each claim (its label: the arm, and the metric where it is not the
pages' default), each setting's label and its sweep file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

# '-3.8 [-7.5, -0.0]' or '-3.8 points [...]'; a wrapped line may break it anywhere a space is
DIFFERENCE = re.compile(r"([+-]\d+\.\d)\*{0,2}(?:\s+points)?\s+\[([+-]\d+\.\d),\s+([+-]\d+\.\d)\]")
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
CONTEXT = 120  # characters around a key figure searched for the word it belongs to
ITEM = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s")  # a list item's first line: its indentation
HEADING = re.compile(r"^#{1,6}\s")


class PageError(ValueError):
    """A page that cannot be read as text: one line naming it."""


def read_page(path: Path, name: str) -> str:
    """The text of the page at ``path`` (``name`` in errors); not UTF-8: a ``PageError`` naming the byte."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise PageError(f"{name}: not UTF-8 text (byte {err.start}: {err.reason})") from None


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


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _ends_unit(line: str) -> bool:
    """Whether the unit below ``line`` starts after it: a blank line, a heading or a table row."""
    return not line.strip() or bool(HEADING.match(line)) or line.startswith("|")


def unit(text: str, at: int) -> tuple[str, str]:
    """(own, frame) of the figure at ``at``: ``own`` the text of its unit up to it (a table row's first
    cell, or its list item or paragraph from its start), ``frame`` the text that frames the unit (a
    table's lead, the paragraphs between the section's heading and the table; a list item's parents)."""
    lines = text[:at].split("\n")
    last = lines[-1]
    if last.startswith("|"):  # a table row: its subject is its first cell
        own = last[1:].split("|")[0]  # up to the figure where it stands in the first cell itself
        above = lines[:-1]
        while above and above[-1].startswith("|"):
            above.pop()
        lead: list[str] = []
        while above and not HEADING.match(above[-1]) and not above[-1].startswith("|"):
            lead.insert(0, above.pop())
        return own, "\n".join(lead)
    i = len(lines) - 1  # the unit's first line: a list item's marker, or the paragraph's first line
    while i > 0 and not ITEM.match(lines[i]) and not _ends_unit(lines[i - 1]):
        i -= 1
    own = "\n".join(lines[i:])
    match = ITEM.match(lines[i])
    if not match:
        return own, ""
    parents, depth, j = [], len(match.group(1)), i - 1
    while j >= 0 and lines[j].strip() and depth > 0:
        parent = ITEM.match(lines[j])
        if parent and len(parent.group(1)) < depth:  # a parent item: its own lines up to its first child
            k = j + 1
            while k < i and not ITEM.match(lines[k]) and _indent(lines[k]) > len(parent.group(1)):
                k += 1
            parents.insert(0, "\n".join(lines[j:k]))
            depth = len(parent.group(1))
        j -= 1
    return own, "\n".join(parents)


def _last(text: str, names: Mapping[str, str]) -> tuple[int, int, str] | None:
    """(start, end, label) of the last name in ``text``, a name inside a longer one not counting."""
    found = [
        (m.start(), m.end(), label) for n, label in names.items() for m in re.finditer(re.escape(n), text)
    ]
    whole = [
        f
        for f in found
        if not any(g[0] <= f[0] and f[1] <= g[1] and g[1] - g[0] > f[1] - f[0] for g in found)
    ]
    return max(whole, key=lambda f: (f[0], f[1] - f[0])) if whole else None


def _as_map(names: Iterable[str] | Mapping[str, str]) -> dict[str, str]:
    return dict(names) if isinstance(names, Mapping) else {n: n for n in names}


def differences(
    text: str, names: Iterable[str] | Mapping[str, str], settings: Iterable[str] | Mapping[str, str] = ()
) -> Iterator[tuple[int, str, str]]:
    """(position, label, interval) of every difference from GRPO in ``text`` that names its method, the
    label 'METHOD on SETTING d' read as the module says (``names`` and ``settings`` as display names, or
    as {what the pages write: label}); a difference called 'paired' is a statistic of its own."""
    names, settings = _as_map(names), _as_map(settings)
    for m in DIFFERENCE.finditer(text):
        own, frame = unit(text, m.start())
        name = _last(own, names)
        between = own[name[1] :] if name else own  # a method named in the frame: all of its unit follows it
        name = name or _last(frame, names)
        if not name:
            continue
        header = column_header(text, m.start())
        setting = _last(between, settings) or _last(frame, settings)
        where = settings.get(header) or (setting[2] if setting else "")
        kind = " (paired)" if "paired" in text[max(0, m.start() - 40) : m.start()] else ""
        on = f" on {where}" if where else ""
        yield m.start(), f"{name[2]}{on} {m.group(1)}{kind}", f"[{m.group(2)}, {m.group(3)}]"


def statements(
    text: str, names: Iterable[str] | Mapping[str, str], settings: Iterable[str] | Mapping[str, str] = ()
) -> list[tuple[str, str]]:
    """(label, value) of every key figure in ``text``: each difference (``differences``) with its
    interval as the value, and the ``KEY_FIGURES``."""
    out = [(label, value) for _, label, value in differences(text, names, settings)]
    for label, (pattern, word) in KEY_FIGURES.items():
        for m in pattern.finditer(text):
            if word in text[max(0, m.start() - 3 * CONTEXT) : m.end() + CONTEXT]:
                out.append((label, next(g for g in m.groups() if g)))
    return out


def conflicts(
    root: Path,
    names: Iterable[str] | Mapping[str, str],
    pages: Sequence[str] | None = None,
    settings: Iterable[str] | Mapping[str, str] = (),
) -> list[str]:
    """Figures stated with two values across README.md and docs/*.md: 'label: value (page), ...'."""
    names, settings = _as_map(names), _as_map(settings)
    paths = pages or ["README.md", *sorted(str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))]
    seen: dict[str, dict[str, list[str]]] = {}
    for page in paths:
        for label, value in statements(read_page(root / page, page), names, settings):
            seen.setdefault(label, {}).setdefault(value, []).append(page)
    return [
        f"{label}: " + "; ".join(f"{v} ({', '.join(sorted(set(p)))})" for v, p in values.items())
        for label, values in seen.items()
        if len(values) > 1
    ]
