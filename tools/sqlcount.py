"""Count the SQL statements that live outside the record modules.

Issue 22 asks that every statement on jobs, attempts, allocations and queues
live in the workspace store (`phalanx.workspace`) or the scheduler's ledger
(`phalanx/scheduler/ledger.py`). This script measures how far the rest of
`src/phalanx` is from that, so the figure in `docs/architecture.md` can be
re-measured:

    .venv/bin/python tools/sqlcount.py            # per file, outside the homes
    .venv/bin/python tools/sqlcount.py --all      # every file, homes included
    .venv/bin/python tools/sqlcount.py --lines    # each statement's line and tables
    .venv/bin/python tools/sqlcount.py --check    # exit 1 if a front end sends any

A statement is a call that sends SQL: `.query(`, `.execute(`, `.all(` or
`.first(` whose first argument is (or is a name assigned) text starting with
a SQL verb, and SQLAlchemy's `text(...)` or `sa.select/insert/update/delete`.
It reads the source with `ast`, so comments and strings that merely mention
SQL are not counted. Exits 0 (the numbers are the output), except that
``--check`` (run by ``make check``) exits 1 when a front end sends SQL itself.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "phalanx"
# Where SQL on the records belongs (issue 22, step 4).
HOMES = ("workspace/", "scheduler/ledger.py")
# Packages that must hold none: they call the service, which calls the records' modules.
FRONT_ENDS = ("cli/", "ml/", "server/", "studio/", "service/", "client/", "terminal/")
SENDERS = {"query", "execute", "all", "first"}
BUILDERS = {"select", "insert", "update", "delete", "text"}
VERB = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|PRAGMA)\b", re.I)
TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN)\s+([a-z_]+)", re.I)


def _texts(node: ast.AST) -> Iterator[str]:
    """Every string constant inside an expression (f-strings and `+` included)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value


def _sql_names(tree: ast.Module) -> dict[str, list[str]]:
    """Names assigned (or `+=`'d) text that starts with a SQL verb, and that text."""
    names: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        texts = list(_texts(value))
        for target in targets:
            if isinstance(target, ast.Name) and (
                target.id in names or any(VERB.match(t) for t in texts[:1])
            ):
                names.setdefault(target.id, []).extend(texts)
    return names


def statements(path: Path) -> list[tuple[int, str]]:
    """(line, tables) of each SQL statement sent in one file."""
    tree = ast.parse(path.read_text(), str(path))
    names = _sql_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute | ast.Name):
            continue
        called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        texts: list[str] = []
        if called in SENDERS and node.args:
            for part in ast.walk(node.args[0]):
                if isinstance(part, ast.Name) and part.id in names:
                    texts += names[part.id]
                elif isinstance(part, ast.Constant) and isinstance(part.value, str):
                    texts.append(part.value)
            if not any(VERB.match(t) for t in texts[:1]):
                continue
        elif called in BUILDERS and _is_sqlalchemy(node.func):
            texts = list(_texts(node))
        else:
            continue
        tables = sorted({t.lower() for t in TABLE.findall(" ".join(texts))} - {"set"})
        found.append((node.lineno, ",".join(tables) or "?"))
    return sorted(found)


def _is_sqlalchemy(func: ast.expr) -> bool:
    """`sa.select(...)`, `sqlalchemy.text(...)` and a bare `text(...)` (imported from it)."""
    if isinstance(func, ast.Attribute):
        return isinstance(func.value, ast.Name) and func.value.id in {"sa", "sqlalchemy"}
    return isinstance(func, ast.Name) and func.id == "text"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="count the homes too")
    parser.add_argument("--lines", action="store_true", help="list each statement")
    parser.add_argument("--check", action="store_true", help="fail if a front end sends SQL")
    args = parser.parse_args(argv)
    total = 0
    in_front_ends: list[str] = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        home = relative.startswith(HOMES)
        if home and not args.all:
            continue
        found = statements(path)
        if not found:
            continue
        total += 0 if home else len(found)
        if relative.startswith(FRONT_ENDS):
            in_front_ends += [f"src/phalanx/{relative}:{line}" for line, _ in found]
        mark = "  (home)" if home else ""
        print(f"{len(found):4d}  src/phalanx/{relative}{mark}")
        if args.lines:
            for line, tables in found:
                print(f"        {line:5d}  {tables}")
    print(f"{total:4d}  outside {' and '.join(HOMES)}")
    if args.check and in_front_ends:
        print(
            "SQL in a front end (move it into the workspace store, the scheduler's ledger "
            "or the module that holds its table): " + ", ".join(in_front_ends),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
