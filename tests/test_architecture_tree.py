"""docs/architecture.md's package tree matches the package: each file it names exists, each file is named."""

from __future__ import annotations

import re

from tests.conftest import REPO

PKG = REPO / "lightning_rlvr"


def tree_files() -> dict[str, set[str]]:
    """Package folder (relative, "" for the root) -> the ``*.py`` names the tree lists under it."""
    text = (REPO / "docs" / "architecture.md").read_text()
    block = text[text.index("```\nlightning_rlvr/\n") + 4 :]
    block = block[: block.index("\n```")].splitlines()[1:]
    out: dict[str, set[str]] = {"": set()}
    stack: list[tuple[int, str]] = []  # (indent, folder) of the entries above this line
    current = ""
    for line in block:
        if not line.startswith("  "):
            break  # configs/, sweeps/, ...: outside the package
        indent = len(line) - len(line.lstrip())
        head = line.split()[0]
        if indent < 17:  # an entry (a folder or root modules); deeper lines continue the entry above
            stack = [(i, d) for i, d in stack if i < indent]
            if head.endswith("/"):
                stack.append((indent, head.rstrip("/")))
                current = "/".join(d for _, d in stack)
            else:
                current = "/".join(d for _, d in stack)
            out.setdefault(current, set())
        names = re.findall(r"\b(\w+\.py)\b", line)
        out[current].update(names)
    return out


def package_files() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for f in PKG.rglob("*.py"):
        if f.name in ("__init__.py", "__main__.py") or "__pycache__" in f.parts:
            continue
        folder = f.parent.relative_to(PKG).as_posix()
        out.setdefault("" if folder == "." else folder, set()).add(f.name)
    return out


def test_the_architecture_tree_lists_every_package_file_and_only_those():
    listed, actual = tree_files(), package_files()
    assert len(actual) > 10 and "credit" in listed and "experiments/sweep" in listed
    missing = sorted(
        f"{d}/{n}".lstrip("/") for d, names in actual.items() for n in names - listed.get(d, set())
    )
    stale = sorted(
        f"{d}/{n}".lstrip("/") for d, names in listed.items() for n in names - actual.get(d, set())
    )
    assert not missing, f"docs/architecture.md's tree misses lightning_rlvr/{missing}: add them"
    assert not stale, f"docs/architecture.md's tree names files that do not exist: {stale}"
    assert set(listed) == set(actual), "every package folder is an entry of the tree"
