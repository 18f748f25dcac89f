"""The code's shape, checked: no import circles between the modules of a crate, and no
source file longer than a reader can hold (800 lines, tests and generated code aside).
Reads the tracked sources only; no servers."""

import re
import subprocess
import warnings
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 800

# Files over MAX_LINES today, with their length when this check was written: they may only
# shrink, and an entry fails the test once its file fits (so the list can only get shorter).
# The target is an empty list; until then the test prints what is left.
OVERSIZE = {}

# Import circles between top-level modules that exist today, each as the sorted set of its
# modules. Same rule: an entry fails once its circle is gone.
KNOWN_CIRCLES: list[frozenset[str]] = []


def tracked(suffixes: tuple[str, ...]) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p.endswith(suffixes) and (REPO / p).exists()]


def is_test_path(p: str) -> bool:
    parts = p.split("/")
    return (
        "tests" in parts or "fuzz" in parts or parts[-1] in ("tests.rs", "conftest.py") or parts[-1].startswith("test_")
    )


def code_lines(text: str) -> int:
    """Lines before a trailing `#[cfg(test)]` module: inline unit tests do not count."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]"):
            return i
    return len(lines)


def test_no_source_file_is_over_800_lines():
    files = tracked((".rs", ".py", ".c", ".h"))
    over, grown = [], []
    fitted = [f"{p} is gone: remove it from OVERSIZE" for p in OVERSIZE if p not in files]
    for p in files:
        if is_test_path(p):
            continue
        n = code_lines((REPO / p).read_text(errors="replace"))
        if p in OVERSIZE:
            if n <= MAX_LINES:
                fitted.append(f"{p} ({n} lines): remove it from OVERSIZE")
            elif n > OVERSIZE[p]:
                grown.append(f"{p}: {n} lines, was {OVERSIZE[p]}; split it rather than grow it")
        elif n > MAX_LINES:
            over.append(f"{p}: {n} lines (at most {MAX_LINES})")
    if OVERSIZE:
        warnings.warn(f"{len(OVERSIZE)} files still over {MAX_LINES} lines: " + ", ".join(OVERSIZE), stacklevel=1)
    assert not (over or grown or fitted), "\n".join(over + grown + fitted)


# -- import circles -----------------------------------------------------------------------------

USE_CRATE = re.compile(r"\bcrate::(\{[^}]*\}|[a-z_][a-z0-9_]*)")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.MULTILINE)
REEXPORT = re.compile(r"^\s*pub\s+use\s+([a-z_][a-z0-9_]*)::(\{[^;]*\}|[A-Za-z_][A-Za-z0-9_]*)\s*;", re.MULTILINE)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def crate_sources() -> dict[str, list[str]]:
    """Source directory of each crate -> its .rs files (tests and benches apart)."""
    crates = defaultdict(list)
    for p in tracked((".rs",)):
        parts = p.split("/")
        if "src" not in parts or "tests" in parts or parts[0] == "fuzz":
            continue
        src = "/".join(parts[: parts.index("src") + 1])
        crates[src].append(p)
    return crates


def top_module(src: str, path: str) -> str | None:
    """The crate's top-level module a file belongs to; None for the crate root."""
    rel = path[len(src) + 1 :]
    if rel in ("lib.rs", "main.rs"):
        return None
    first = rel.split("/")[0]
    return first.removesuffix(".rs")


def names_in(group: str) -> list[str]:
    """`{a, b::c, d as e}` -> [a, b, d]; `a` -> [a]."""
    if not group.startswith("{"):
        return [group]
    return [n.strip().split("::")[0].split(" ")[0] for n in group.strip("{}").split(",") if n.strip()]


def module_graph(src: str, files: list[str]):
    """Edges between top-level modules: module -> {module it uses: an example file:line}."""
    root_text = ""
    for name in ("lib.rs", "main.rs"):
        if f"{src}/{name}" in files:
            root_text += strip_comments((REPO / src / name).read_text())
    modules = set(MOD_DECL.findall(root_text))
    # Items the root re-exports from a module count as that module's (`crate::Engine`).
    reexported = {}
    for module, group in REEXPORT.findall(root_text):
        for item in names_in(group):
            reexported[item] = module
    edges: dict[str, dict[str, str]] = defaultdict(dict)
    for f in files:
        me = top_module(src, f)
        if me is None:
            continue
        text = strip_comments((REPO / f).read_text())
        cut = text.find("#[cfg(test)]")
        if cut >= 0:
            text = text[:cut]
        for m in USE_CRATE.finditer(text):
            for name in names_in(m.group(1)):
                target = name if name in modules else reexported.get(name)
                if target and target != me:
                    line = text.count("\n", 0, m.start()) + 1
                    edges[me].setdefault(target, f"{f}:{line}")
    return edges


def circles(edges) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
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

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_inside_a_crate():
    found, seen = [], []
    for src, files in sorted(crate_sources().items()):
        edges = module_graph(src, files)
        for comp in circles(edges):
            seen.append(comp)
            if frozenset(comp) in KNOWN_CIRCLES:
                continue
            how = [f"{a} -> {b} ({edges[a][b]})" for a in comp for b in comp if b in edges.get(a, {})]
            found.append(f"{src}: {' / '.join(comp)}\n    " + "\n    ".join(how))
    stale = [sorted(c) for c in KNOWN_CIRCLES if c not in {frozenset(x) for x in seen}]
    if KNOWN_CIRCLES:
        warnings.warn(f"known import circles left: {[sorted(c) for c in KNOWN_CIRCLES]}", stacklevel=1)
    assert not found, "import circles:\n" + "\n".join(found)
    assert not stale, f"remove these from KNOWN_CIRCLES, they are gone or changed: {stale}"


def test_the_circle_finder_finds_circles():
    edges = {"a": {"b": "x"}, "b": {"c": "x"}, "c": {"a": "x"}, "d": {"a": "x"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b": "x"}, "b": {}}) == []
    assert names_in("{a, b::c, d as e}") == ["a", "b", "d"]
