"""Choosing a setting from a tuning sweep: per cell of the other axes, the best bracketed value.

Layer: ``experiments``. ``choice_text`` writes the choice as a table and, with one other axis, the
``axis_overrides`` block to paste into the main sweep file.
"""

from __future__ import annotations

import yaml

from .rows import display_names


def choose_values(
    axes: list[str], rows: list[dict], axis: str, by: str, tie: str = "lower", tolerance: float = 0.0
) -> list[dict]:
    """Per combination of the other axes: the ``axis`` value with the highest seed-mean ``by``.

    The rule, applied and reported: values whose mean is within ``tolerance`` of the best tie, and
    ``tie`` picks among them (``lower``: the smallest value, ``higher``: the largest, ``first``: the
    first in the grid; non-numeric values always fall back on ``first``). The pick is *chosen* only when
    it is bracketed: every tied value lies strictly inside the range the cell tried (numerically, else in
    grid order); otherwise the best may lie beyond the edge and ``extend`` names the value to run next
    (one grid step past it: a ratio on a positive numeric grid, a difference otherwise).

    Returns [{"cell": {other axes}, "best": the pick, "chosen": the pick or None when it needs an
    extension, "means": {value: mean}, "tied": [values within tolerance], "bracketed": the pick is
    interior, "extend": [value labels to run next]}] in first-seen order.
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
        order = _order(list(means))
        top = max(means.values()) if means else None
        tied = [v for v, m in means.items() if top is not None and m >= top - tolerance]
        rule = tie if all(isinstance(order[v], float) for v in tied) else "first"
        best = None
        if tied:
            best = {"first": tied[0], "lower": min(tied, key=order.get), "higher": max(tied, key=order.get)}[
                rule
            ]
        extend = _extension(tied, order)
        entry = {"cell": dict(zip(others, key)), "best": best, "means": means, "tied": tied}
        entry |= {"bracketed": _bracketed(best, order), "extend": extend, "chosen": None if extend else best}
        out.append(entry)
    return out


def _order(tried: list[str]) -> dict[str, float | int]:
    """Each value's place: the number it names, or its grid position when one is not a number."""
    try:
        return {v: float(v) for v in tried}
    except ValueError:
        return {v: i for i, v in enumerate(tried)}


def _bracketed(chosen: str | None, order: dict[str, float | int]) -> bool:
    """Whether the cell tried a value on each side of its choice (numerically, else in grid order): a
    best value at the edge of what was tried may only be the best of too narrow a range."""
    if chosen is None:
        return False
    return min(order.values()) < order[chosen] < max(order.values())


def _extension(tied: list[str], order: dict[str, float | int]) -> list[str]:
    """The values to run next so that every tied best is interior: one grid step past each edge a tied
    value sits on (none when all are interior)."""
    if not tied:
        return []
    ranked = sorted(order, key=order.get)
    out = []
    for edge, inner, side in ((ranked[0], ranked[1:2], "below"), (ranked[-1], ranked[-2:-1], "above")):
        if edge not in tied:
            continue
        if not inner or not isinstance(order[edge], float):
            out.append(f"a value {side} {edge}")
            continue
        e, i = order[edge], order[inner[0]]
        nxt = e * (e / i) if e > 0 and i > 0 else e + (e - i)
        out.append(f"{nxt:g}")
    return out


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


def choice_text(
    axes: list[str], rows: list[dict], axis: str, by: str, tie: str = "lower", tolerance: float = 0.0
) -> str:
    """The choice as a table and, with one other axis, the ``axis_overrides`` block of the main sweep
    (bracketed choices only: a cell whose best sits at an edge is told which value to run next)."""
    choices = choose_values(axes, rows, axis, by, tie, tolerance)
    values = list(dict.fromkeys(v for c in choices for v in c["means"]))
    others = [a for a in axes if a != axis]
    header = [*others, f"chosen {axis}", *(f"{by} at {v}" for v in values)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    names = display_names(axes, rows)  # the table shows short names; the YAML block keeps the values
    for c in choices:
        means = [f"{c['means'][v]:.3f}" if v in c["means"] else "-" for v in values]
        shown = [names[a][str(v)] for a, v in c["cell"].items()]
        said = str(c["chosen"]) if c["chosen"] else f"none: extend the grid to {' and '.join(c['extend'])}"
        lines.append("| " + " | ".join([*shown, said, *means]) + " |")
    within = f"within {tolerance:g} of the best" if tolerance else "equal to the best"
    text = [
        f"## Chosen {axis}\n",
        f"Per {', '.join(others)}: the {axis} with the highest seed-mean {by}; values {within} tie, and the "
        f"tie goes to the {'first listed in the grid' if tie == 'first' else tie + ' value'} "
        f"(`report.tie`, `report.tie_tolerance`). A value is chosen only when bracketed: every tied value "
        f"has a tried {axis} on each side; otherwise the table says which value to run next.\n",
        "\n".join(lines) + "\n",
    ]
    edge = [names[a][str(v)] for c in choices if c["extend"] for a, v in c["cell"].items()]
    if edge:
        text.append(
            f"Not bracketed: {', '.join(edge)} (the best {axis}, or one tied with it, is the smallest or "
            "largest value the cell ran, so a value beyond it may be better; run the value named before "
            "using it).\n"
        )
    chosen = [c for c in choices if c["chosen"]]
    if len(others) == 1 and chosen:
        block = {others[0]: {list(c["cell"].values())[0]: {axis: _number(c["chosen"])} for c in chosen}}
        dump = yaml.safe_dump({"axis_overrides": block}, sort_keys=False, default_flow_style=None)
        text.append(f"To use it, paste into the main sweep file (chosen by {by}):\n\n```yaml\n{dump}```\n")
    return "\n".join(text)
