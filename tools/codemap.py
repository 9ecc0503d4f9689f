"""The figures docs/architecture.md quotes, measured on this tree.

    .venv/bin/python tools/codemap.py

- modules and lines of ``src/phalanx``;
- circles between files of different packages (strongly connected components of
  the file import graph, lazy and ``TYPE_CHECKING`` imports included);
- imports between packages that break the layer contract (``lint-imports``,
  ``[tool.importlinter]`` in pyproject.toml), ignored ones included;
- the longest functions, with their cyclomatic complexity (ruff's mccabe, C901).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
BIN = Path(sys.executable).parent


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "phalanx").rglob("*.py")):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    graph[name].add(full if full in mods else node.module)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names)
        graph[name] = {t for t in graph[name] if t in mods and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one file (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    part.append(top)
                    if top == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def functions(mods: dict[str, Path]) -> list[tuple[int, str]]:
    sized = []
    for path in mods.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                sized.append((length, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return sorted(sized, reverse=True)


def complexities() -> dict[str, int]:
    """``path:line`` of each function → its cyclomatic complexity (ruff's mccabe)."""
    out = subprocess.run(
        [str(BIN / "ruff"), "check", "--select", "C901", "--config",
         "lint.mccabe.max-complexity=0", "--output-format", "json", "--exit-zero", str(SRC)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = {}
    for item in json.loads(out):
        where = f"{Path(item['filename']).relative_to(ROOT)}:{item['location']['row']}"
        found[where] = int(item["message"].split("(")[1].split(" ")[0])
    return found


def main() -> int:
    mods = modules()
    lines = sum(len(p.read_text().splitlines()) for p in mods.values())
    print(f"modules: {len(mods)}, lines: {lines}")
    spanning = [c for c in circles(import_graph(mods)) if len({package(m) for m in c}) > 1]
    print(f"circles between files of different packages: {len(spanning)}")
    for part in spanning:
        print("  " + " -> ".join(part))
    contract = subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache"], capture_output=True, text=True, cwd=ROOT
    )
    print("layer contract: " + ("kept" if contract.returncode == 0 else "BROKEN"))
    for line in contract.stdout.splitlines():
        if line.startswith("- phalanx"):
            print("  " + line.strip())
    with open(ROOT / "pyproject.toml", "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    ignored = [i for c in contracts for i in c.get("ignore_imports", [])]
    print(f"imports the contract lets run upward (ignore_imports): {len(ignored)}")
    for item in ignored:
        print("  " + item)
    complexity = complexities()
    sized = functions(mods)
    over = sorted((c, w) for w, c in complexity.items() if c > 15)
    print(f"functions: {len(sized)}; over complexity 15: {len(over)}")
    print("longest functions (lines, complexity):")
    for length, where in sized[:10]:
        print(f"  {length:4d}  {complexity.get(where.split(' ')[0], 0):3d}  {where}")
    print("most complex functions (complexity):")
    names = {w.split(" ")[0]: w for _, w in sized}
    for value, where in sorted(over, reverse=True)[:10]:
        print(f"  {value:4d}  {names.get(where, where)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
