"""Which files of a build context the engine leaves out: ``.dockerignore`` and
``.containerignore``, read as the engine reads them.

The file is the first of these that exists (what podman 4 and BuildKit do):

- podman: ``<Dockerfile>.dockerignore``, ``<Dockerfile>.containerignore`` (beside the
  Dockerfile), then ``.containerignore``, ``.dockerignore`` at the context's root;
- docker: ``<Dockerfile>.dockerignore``, then ``.dockerignore`` at the root.

The rules are Docker's (moby's ``patternmatcher``): a line is a pattern, ``#`` in the
first column a comment; surrounding spaces are trimmed and the pattern is cleaned
(``./a/`` is ``a``, a leading ``/`` is dropped), so every pattern is anchored at the
context's root. ``*`` and ``?`` match within one path segment, ``**`` any number of
segments (none too), ``[...]`` a set, ``\\`` escapes. A pattern that matches a folder
leaves out everything under it. ``!pattern`` keeps again what an earlier pattern left
out; the last pattern that matches a path decides. Unlike ``.gitignore``, ``*.log``
names only the root's ``.log`` files: ``**/*.log`` names them all.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from phalanx.errors import PhalanxError


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    keep: bool
    """A ``!`` pattern: it keeps what it matches."""


def ignore_file(context: Path, dockerfile: Path, engine: str) -> Path | None:
    """The ignore file ``engine`` reads for a build of ``dockerfile`` in ``context``."""
    beside = [Path(f"{dockerfile}.dockerignore")]
    root = [context / ".dockerignore"]
    if engine == "podman":
        beside.append(Path(f"{dockerfile}.containerignore"))
        root.insert(0, context / ".containerignore")
    return next((p for p in (*beside, *root) if p.is_file()), None)


class ContextIgnore:
    """The patterns of one ignore file, asked path by path."""

    def __init__(self, lines: Iterable[str], source: str = ".dockerignore") -> None:
        """Read the patterns of an ignore file's ``lines``.

        Args:
            lines: The ignore file's lines.
            source: Its name, for the message of a pattern that cannot be read.

        Raises:
            PhalanxError: a pattern the engine would refuse too (an unclosed ``[``, a
                lone ``!``).
        """
        self._patterns: list[_Pattern] = []
        for number, line in enumerate(lines, 1):
            if number == 1:
                line = line.removeprefix("\ufeff")
            if line.startswith("#"):
                continue
            pattern = line.strip()
            keep = pattern.startswith("!")
            if keep:
                pattern = pattern[1:].strip()
                if not pattern:
                    raise PhalanxError(
                        f"{source} line {number}: '!' needs a pattern after it; fix or remove "
                        "the line"
                    )
            if not pattern:
                continue
            # Go's filepath.Clean; the context is the root, so a leading / is dropped.
            pattern = posixpath.normpath(pattern).lstrip("/") or "/"
            try:
                regex = re.compile(_regex(pattern))
            except re.error as exc:
                raise PhalanxError(
                    f"{source} line {number}: {pattern!r} is not a valid pattern ({exc}); fix "
                    "or remove the line"
                ) from exc
            self._patterns.append(_Pattern(regex, keep))

    @classmethod
    def read(cls, path: Path | None) -> ContextIgnore:
        """The patterns of the file at ``path``; none (nothing left out) when ``None``.

        Raises:
            PhalanxError: the file cannot be read, or holds a pattern that cannot be.
        """
        if path is None:
            return cls(())
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            raise PhalanxError(f"{path}: {exc.strerror}") from exc
        return cls(text.splitlines(), str(path))

    @property
    def has_exceptions(self) -> bool:
        """Whether a ``!`` pattern may keep something inside a folder left out."""
        return any(p.keep for p in self._patterns)

    def excluded(self, rel: str) -> bool:
        """Whether the engine leaves out ``rel`` (a ``/``-separated path in the context)."""
        parents = rel.split("/")[:-1]
        prefixes = ["/".join(parents[: i + 1]) for i in range(len(parents))]
        excluded = False
        for pattern in self._patterns:
            if pattern.keep != excluded:
                continue  # only a keep can change an exclusion, and the other way round
            if any(pattern.regex.fullmatch(p) for p in (rel, *prefixes)):
                excluded = not pattern.keep
        return excluded

    def files(self, folder: Path, skipped: Sequence[str] = ()) -> list[Path]:
        """The regular files of ``folder`` that are not left out, in a fixed order.

        Args:
            skipped: Folder names never walked into (caches, ``.git``).
        """
        found: list[Path] = []
        prune = not self.has_exceptions  # a folder left out has nothing kept inside
        for root, dirs, names in os.walk(folder):
            base = Path(root)
            prefix = base.relative_to(folder).as_posix()
            prefix = "" if prefix == "." else prefix + "/"
            dirs[:] = sorted(
                d for d in dirs if d not in skipped and not (prune and self.excluded(prefix + d))
            )
            found += [
                base / name
                for name in sorted(names)
                if (base / name).is_file() and not self.excluded(prefix + name)
            ]
        return found


def _regex(pattern: str) -> str:
    """moby's translation of a pattern to a regular expression."""
    out: list[str] = []
    i, n, in_set = 0, len(pattern), False
    while i < n:
        ch = pattern[i]
        i += 1
        if in_set:
            if ch == "\\" and i < n:
                out.append("\\" + pattern[i])
                i += 1
            else:
                out.append(ch)
                in_set = ch != "]"
        elif ch == "*":
            if i < n and pattern[i] == "*":  # **: any number of segments
                i += 1
                if i < n and pattern[i] == "/":
                    i += 1
                out.append(".*" if i >= n else "(.*/)?")
            else:
                out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            out.append("[")
            in_set = True
        elif ch == "\\":
            out.append(re.escape(pattern[i]) if i < n else "\\\\")
            i += 1
        else:
            out.append(re.escape(ch))
    if in_set:
        raise re.error("unclosed [")
    return "".join(out)
