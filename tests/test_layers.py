"""The package's floors (docs/architecture.md), checked on every test run.

``lint-imports`` checks the contracts in ``pyproject.toml`` (a module imports only the floors below its
own; scoring, losses, credit and core import only what their contracts allow). The rest is what a
layers contract cannot see: cycles inside one floor, the size of the package root, long files.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lightning_rlvr"


def import_graph() -> dict[str, set[str]]:
    """Module -> package modules it imports (lazy imports included), from the source."""
    mods = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, (f, is_pkg) in mods.items():
        base = m.split(".") if is_pkg else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                head = base[: len(base) - node.level + 1] if node.level else []
                t = ".".join(head + ([node.module] if node.module else []))
                targets = [t] + [f"{t}.{a.name}" for a in node.names]
            for t in targets:
                parts = t.split(".")
                while parts and ".".join(parts) not in mods:
                    parts.pop()
                t = ".".join(parts)
                if t and t != m and not m.startswith(t + "."):  # a package's own __init__: not an edge
                    graph[m].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    cmd = [exe, "--config", str(ROOT / "pyproject.toml")]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "broken" not in run.stdout.lower().split("contracts:")[-1].replace("0 broken", "")


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_package_root_stays_small() -> None:
    root = sorted(f.name for f in PKG.glob("*.py") if f.name != "__init__.py")
    assert len(root) <= 14, root


@pytest.mark.parametrize("path", sorted(str(f.relative_to(ROOT)) for f in PKG.rglob("*.py")))
def test_every_file_names_its_concern(path: str) -> None:
    """A file's first line says what it is for, so a newcomer can name its concern.

    Files are split by concern, never by a line count: this is what a length cap used to stand for.
    """
    text = (ROOT / path).read_text(encoding="utf-8")
    if not text.strip():
        return  # an empty package marker
    first = text.lstrip().splitlines()[0]
    assert first.startswith(('"""', "#")), f"{path}: the first line should say what the file is for"
    said = first.strip('"# ').rstrip(".")
    assert len(said) >= 10 and said != Path(path).parent.name, (
        f"{path}: the first line says too little: {first!r}"
    )


def test_no_hand_packed_code() -> None:
    """The formatter decides the layout: no ``fmt: skip`` or ``fmt: off`` in the package or its tests."""
    packed = [
        f"{f.relative_to(ROOT)}:{i}"
        for f in [*PKG.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"#\s*fmt:\s*(skip|off)", line)
    ]
    assert packed == []


@pytest.mark.parametrize("args", [["format", "--check"], ["check"]], ids=["format", "lint"])
def test_ruff_is_clean(args: list[str]) -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    dirs = ["lightning_rlvr", "tests", "benchmarks"]
    run = subprocess.run([ruff, *args, *dirs], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-1000:]


def test_every_module_states_its_floor() -> None:
    """The layers contract is exhaustive: a new top-level module must be placed on a floor."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = contracts[0]["layers"]
    named = {m.strip() for floor in layers for m in floor.split("|")}
    top = {f.stem for f in PKG.glob("*.py") if f.name != "__init__.py"} | {
        d.name for d in PKG.iterdir() if (d / "__init__.py").exists()
    }
    assert top == named


def test_every_relative_import_names_a_module_that_exists() -> None:
    """Lazy imports inside functions too (after a move, ``from .x import`` fails only when it runs)."""
    missing = []
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        base = parts[:-1]  # the package a module (or a package's __init__) is in
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                head = base[: len(base) - node.level + 1]
                target = ROOT.joinpath(*head, *(node.module.split(".") if node.module else []))
                if not (target.with_suffix(".py").exists() or (target / "__init__.py").exists()):
                    missing.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert missing == []
