"""Choosing a setting from a tuning sweep: per cell of the other axes, the value with the best seed mean.

Layer: ``experiments``. ``choice_text`` writes the choice as a table and, with one other axis, the
``axis_overrides`` block to paste into the main sweep file.
"""

from __future__ import annotations

import yaml

from .rows import display_names


def choose_values(axes: list[str], rows: list[dict], axis: str, by: str) -> list[dict]:
    """Per combination of the other axes: the ``axis`` value with the highest seed-mean ``by``.

    Values are tried in first-seen order (the grid's order), and a later one must be strictly
    better, so a tie keeps the earlier one. Returns [{"cell": {other axes}, "chosen": value,
    "means": {value: mean}}] in first-seen order.
    """
    others = [a for a in axes if a != axis]
    groups: dict[tuple, dict[str, list[float]]] = {}
    for row in rows:
        key = tuple(str(row[a]) for a in others)
        values = groups.setdefault(key, {}).setdefault(str(row[axis]), [])
        if row.get(by) not in ("", None):
            values.append(float(row[by]))
    out = []
    for key, per_value in groups.items():
        means = {v: sum(xs) / len(xs) for v, xs in per_value.items() if xs}
        chosen = None
        for v, m in means.items():
            if chosen is None or m > means[chosen]:
                chosen = v
        out.append({"cell": dict(zip(others, key)), "chosen": chosen, "means": means})
        out[-1]["bracketed"] = _bracketed(chosen, list(means))
    return out


def _bracketed(chosen: str | None, tried: list[str]) -> bool:
    """Whether the cell tried a value on each side of its choice (numerically, else in grid order): a
    best value at the edge of what was tried may only be the best of too narrow a range."""
    if chosen is None:
        return False
    try:
        key = {v: float(v) for v in tried}
    except ValueError:
        key = {v: i for i, v in enumerate(tried)}
    return min(key.values()) < key[chosen] < max(key.values())


def _number(label: str | None):
    """A value label back as the number it names (``5e-05`` -> 5e-05), so YAML writes it as one."""
    if label is None:
        return None
    try:
        return int(label)
    except ValueError:
        try:
            return float(label)
        except ValueError:
            return label


def choice_text(axes: list[str], rows: list[dict], axis: str, by: str) -> str:
    """The choice as a table and, with one other axis, the ``axis_overrides`` block of the main sweep."""
    choices = choose_values(axes, rows, axis, by)
    values = list(dict.fromkeys(v for c in choices for v in c["means"]))
    others = [a for a in axes if a != axis]
    header = [*others, f"chosen {axis}", *(f"{by} at {v}" for v in values)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    names = display_names(axes, rows)  # the table shows short names; the YAML block keeps the values
    for c in choices:
        means = [f"{c['means'][v]:.3f}" if v in c["means"] else "-" for v in values]
        shown = [names[a][str(v)] for a, v in c["cell"].items()]
        lines.append("| " + " | ".join([*shown, str(c["chosen"]), *means]) + " |")
    text = [
        f"## Chosen {axis}\n",
        f"Per {', '.join(others)}: the {axis} with the highest seed-mean {by}; on a tie, the one listed "
        "first in the grid.\n",
        "\n".join(lines) + "\n",
    ]
    edge = [names[a][str(v)] for c in choices if not c["bracketed"] for a, v in c["cell"].items()]
    if edge:
        text.append(
            f"Not bracketed: {', '.join(edge)} (the chosen {axis} is the smallest or largest value the cell "
            "ran, so a value beyond it may be better; run the next one on that side before using it).\n"
        )
    if len(others) == 1:
        block = {others[0]: {list(c["cell"].values())[0]: {axis: _number(c["chosen"])} for c in choices}}
        dump = yaml.safe_dump({"axis_overrides": block}, sort_keys=False, default_flow_style=None)
        text.append(f"To use it, paste into the main sweep file (chosen by {by}):\n\n```yaml\n{dump}```\n")
    return "\n".join(text)
