"""The house's import rules (ARCHITECTURE.md, "Floors"): data flows one way, so no module imports
one on a higher floor and no import circle exists -- function-level imports included (a deferred
import hides a circle from the interpreter, not from a reader).

The graph is read from the source (``ast``): every ``import`` / ``from ... import`` of a
``privrec`` module anywhere in a file, resolved to the module file it names.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "privrec"

#: the floors of ARCHITECTURE.md; a module belongs to the longest prefix listed (lowest first)
FLOORS = {
    "privrec": 0,
    "privrec._io": 1,
    "privrec._validation": 1,
    "privrec._constraints": 1,
    "privrec._hashing": 1,
    "privrec._params": 2,
    "privrec.privacy": 2,
    "privrec.solvers": 3,
    "privrec.allocation": 3,
    "privrec.data": 3,
    "privrec.pipeline": 4,
    "privrec.evaluation": 4,
    "privrec.tuning": 5,
    "privrec.convex": 5,
    "privrec.models": 6,
    "privrec.evaluation.experiment": 7,
    "privrec.serving": 7,
    "privrec.distributed": 7,
    "privrec.privacy.audit": 7,
    "privrec.federated": 8,
    "privrec.commands": 8,
    "privrec.evaluation.compare": 8,
    "privrec.cli": 9,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """``{module: modules it imports}`` over privrec, function-level imports included."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    targets.add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        graph[name] = {t for t in targets if t in mods and t != name}
    return graph


def floor(module: str) -> int:
    best = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len)
    return FLOORS[best]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_floor():
    assert all(floor(m) >= 0 for m in _modules())


def test_no_import_runs_up_a_floor():
    graph = import_graph()
    upward = sorted(
        f"{a} (floor {floor(a)}) -> {b} (floor {floor(b)})"
        for a, ts in graph.items()
        for b in ts
        if floor(b) > floor(a)
    )
    assert upward == [], "imports that run back up:\n" + "\n".join(upward)


def test_no_import_circle():
    circles = _circles(import_graph())
    assert circles == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_no_module_over_600_lines_and_no_class_over_300():
    """Issue 41's size limits: one concern per module, estimators thin."""
    import ast

    over = []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        name = str(path.relative_to(ROOT.parent))
        if text.count("\n") > 600:
            over.append(f"{name}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 300:
                over.append(f"{name}:{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert over == [], "over the size limits:\n" + "\n".join(over)
