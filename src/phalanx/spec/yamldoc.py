"""YAML text → plain data plus the line of every key, in bounded time and memory.

PyYAML's ``safe_load`` forgets where things were and silently keeps the last
of two equal keys; composing the node tree first keeps both facts.

Every YAML document phalanx reads from a user goes through here (a job spec,
an environment file, a conda file, a ``--set`` value, the SDK's ``load_job``),
so none of them can make phalanx spend more than it should:

- at most :data:`MAX_CHARS` characters of text, none of them a control
  character (:mod:`phalanx.limits`; tabs and line breaks are fine), checked
  before parsing, and again on every value (a quoted ``"\\0"`` is one);
- at most :data:`MAX_DEPTH` levels of nesting and :data:`MAX_VALUES` nodes,
  stopped while composing (deep nesting would otherwise overflow Python's
  stack, and every node composed costs about 600 bytes); libyaml's parser
  feeds the composer where PyYAML has it (its pure-Python scanner took a
  second for a megabyte of blank lines);
- at most :data:`MAX_VALUES` values and :data:`MAX_EXPANDED_CHARS` characters
  of text *with every alias expanded*, counted once per anchor on the node
  graph before anything is built. An alias is a reference: a few hundred
  bytes of nested aliases ("billion laughs") stand for billions of values,
  which every later step (line numbers, pydantic, JSON) would copy out. An
  alias of an enclosing anchor (a document that holds itself) is refused;
- integers of at most :data:`MAX_INT_CHARS` characters; no ``!!binary``.

Each is refused with a :class:`~phalanx.errors.SpecError` naming the file and
line, which the CLI prints as one line (exit 2) and the server as a 422.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from phalanx.errors import SpecError
from phalanx.limits import FIX, bad_character, clip, describe_character

#: Field path (``("resources", "instance_count")``; list items by index as
#: ``"0"``) → 1-based line of its key (or list item).
LineMap = dict[tuple[str, ...], int]

MAX_CHARS = 1 << 20
"""Characters of one document (1 Mi; a job spec is a few thousand)."""
MAX_DEPTH = 100
"""Levels of nesting, aliases expanded."""
MAX_VALUES = 10_000
"""Keys, values and list items, aliases expanded (a job spec has dozens, a conda file
hundreds)."""
MAX_EXPANDED_CHARS = 4 << 20
"""Characters of every key and value together, aliases expanded."""
MAX_INT_CHARS = 64
"""Characters of one integer (Python refuses more than 4300 digits with a traceback)."""
# UTF-8 takes at most 4 bytes a character: a file longer than this has too many.
_MAX_BYTES = 4 * MAX_CHARS

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlSyntaxError(SpecError):
    """The text is not YAML, or a value cannot be read as its type (``--set`` then
    takes it as text), as opposed to YAML over a limit."""


def read_yaml(text: str, source: str) -> tuple[dict[str, Any], LineMap]:
    """Parse a job spec document.

    Args:
        text: YAML text.
        source: Name of the file, for errors.

    Returns:
        The document as a dict, and the line of each field path.

    Raises:
        SpecError: Invalid YAML, a duplicate key, an empty document, a
            document that is not a mapping, or one over the limits above.
    """
    lines: LineMap = {}

    def empty() -> None:
        raise SpecError("the job spec is empty; it needs at least a command: line", source=source)

    def walk(node: yaml.Node) -> None:
        _walk(node, (), lines, source, set())

    data, node = _load(text, source, on_empty=empty, on_node=walk)
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"the single value {data!r}"
        raise SpecError(
            f"the job spec must be a mapping of key: value lines; got {kind}",
            source=source,
            line=None if node is None else node.start_mark.line + 1,
        )
    return data, lines


def load_yaml(text: str, source: str) -> Any:
    """Any YAML document a user gives (a conda file, a ``--set`` value), within the
    limits above; ``None`` for an empty one.

    Raises:
        YamlSyntaxError: Not YAML.
        SpecError: A document over the limits.
    """
    data, _ = _load(text, source, on_empty=lambda: None, on_node=lambda node: None)
    return data


def read_text(path: str | os.PathLike[str], source: str) -> str:
    """The text of a file a user gave (a spec, a conda or pip file), read no further
    than :data:`MAX_CHARS` allows, so a huge file costs no memory.

    Raises:
        OSError: the file cannot be read (the caller words it).
        SpecError: more than :data:`MAX_CHARS` characters, or not UTF-8.
    """
    with open(path, "rb") as f:
        data = f.read(_MAX_BYTES + 1)
    if len(data) > _MAX_BYTES:
        raise SpecError(
            f"more than {_MAX_BYTES} bytes; at most {MAX_CHARS} characters (1 MiB) are read",
            source=source,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"not UTF-8 text ({exc.reason}); save the file as UTF-8", source=source
        ) from None


def check_text(text: str, source: str) -> None:
    """Refuse text over :data:`MAX_CHARS` or holding a control character.

    Raises:
        SpecError: naming the line and column of the character.
    """
    if len(text) > MAX_CHARS:
        raise SpecError(
            f"{len(text)} characters of YAML; at most {MAX_CHARS} (1 MiB) are read: keep "
            "large data in the files the spec names",
            source=source,
        )
    at = bad_character(text)
    if at is not None:
        line = text.count("\n", 0, at) + 1
        column = at - text.rfind("\n", 0, at)
        raise SpecError(
            f"{describe_character(text[at])} at column {column}; {FIX}", source=source, line=line
        )


def _parser_base() -> type:
    """libyaml's parser (C, about ten times faster) under PyYAML's composer, which is
    Python and so can be bounded node by node; PyYAML's own parser without libyaml."""
    try:  # there when PyYAML was built with libyaml
        from yaml.cyaml import CParser  # type: ignore[attr-defined]
    except ImportError:
        return yaml.SafeLoader
    c_parser: Any = CParser

    class CParsedLoader(Composer, c_parser, SafeConstructor, Resolver):
        def __init__(self, stream: str) -> None:
            c_parser.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            Composer.__init__(self)

    return CParsedLoader


class _BoundedLoader(_parser_base()):  # type: ignore[misc]
    """PyYAML's safe loader, stopped past :data:`MAX_DEPTH` or :data:`MAX_VALUES` nodes
    while composing."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self._source = source
        self._depth = 0
        self._composed = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        # Every node or alias composed is a value at least once: counted here, a
        # document of too many is refused before it is all in memory.
        self._composed += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _too_deep(self._source, self.peek_event().start_mark.line + 1)
            if self._composed > MAX_VALUES:
                line = self.peek_event().start_mark.line + 1
                raise SpecError(
                    f"more than {MAX_VALUES} keys and values; a document this large is not read",
                    source=self._source,
                    line=line,
                )
            node = super().compose_node(parent, index)
            assert node is not None  # a node was announced: the parser yields one
            return node
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            # PyYAML's constructors fail this way on a malformed tagged or implicit value
            # (`2020-13-45` is a timestamp, `!!int abc`): one line, not a traceback.
            kind = str(node.tag).rsplit(":", 1)[-1]
            why = clip(" ".join(str(exc).split()))
            raise YamlSyntaxError(
                f"the value cannot be read as {kind} ({why}); quote it to make it text",
                source=self._source,
                line=node.start_mark.line + 1,
            ) from None

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_INT_CHARS:
            raise YamlSyntaxError(
                f"a number of {len(node.value)} characters; at most {MAX_INT_CHARS} are read "
                "(quote it to make it text)",
                source=self._source,
                line=node.start_mark.line + 1,
            )
        value: int = self.construct_yaml_int(node)
        return value

    def construct_no_binary(self, node: yaml.ScalarNode) -> bytes:
        raise SpecError(
            "!!binary values are not read; write the value as text",
            source=self._source,
            line=node.start_mark.line + 1,
        )


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_bounded_int)
_BoundedLoader.add_constructor("tag:yaml.org,2002:binary", _BoundedLoader.construct_no_binary)


def _load(
    text: str,
    source: str,
    *,
    on_empty: Callable[[], None],
    on_node: Callable[[yaml.Node], None],
) -> tuple[Any, yaml.Node | None]:
    """The document built from ``text`` after every check; its root node."""
    check_text(text, source)
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text, source)
        node = loader.get_single_node()
        if node is None:
            on_empty()
            return None, None
        _Measure(source).node(node, 1)
        on_node(node)
        return loader.construct_document(node), node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if "maximum nesting depth" in str(exc.problem) and mark is not None:
            raise _too_deep(source, mark.line + 1) from None  # libyaml's own limit (1000)
        raise _syntax_error(exc, text, source) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise YamlSyntaxError(
            f"character U+{exc.character:04X} is not allowed in YAML; remove it",
            source=source,
            line=line,
        ) from None
    except yaml.YAMLError as exc:
        message = f"not valid YAML: {' '.join(str(exc).split())}"
        raise YamlSyntaxError(message, source=source) from None
    finally:
        if loader is not None:
            loader.dispose()


def _too_deep(source: str, line: int) -> SpecError:
    return SpecError(
        f"nested more than {MAX_DEPTH} levels deep; flatten it",
        source=source,
        line=line,
    )


class _Measure:
    """The document's size with every alias expanded, counted once per node.

    Aliases make the node tree a graph whose nodes are shared: each node's
    values, characters and height are worked out once and reused wherever it
    is referred to, so the count costs one visit per node of the text however
    far the aliases would expand. It stops as soon as a limit is passed.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.known: dict[int, tuple[int, int, int]] = {}
        self.open: set[int] = set()

    def node(self, node: yaml.Node, level: int) -> tuple[int, int, int]:
        """``(values, characters, height)`` of ``node``, at nesting ``level``.

        Raises:
            SpecError: a limit passed, a control character in a value, or an alias
                of an enclosing anchor.
        """
        key = id(node)
        line = node.start_mark.line + 1
        if key in self.open:
            raise SpecError(
                "an alias (*name) refers to a mapping or list that holds it, so the "
                "document would hold itself; remove the alias",
                source=self.source,
                line=line,
            )
        known = self.known.get(key)
        if known is None:
            if level > MAX_DEPTH:
                raise _too_deep(self.source, line)
            known = self._count(node, level, line)
            self.known[key] = known
        if level + known[2] - 1 > MAX_DEPTH:
            raise _too_deep(self.source, line)
        return known

    def _count(self, node: yaml.Node, level: int, line: int) -> tuple[int, int, int]:
        if isinstance(node, yaml.ScalarNode):
            text = str(node.value)
            at = bad_character(text)
            if at is not None:
                raise SpecError(
                    f"{describe_character(text[at])} in this value; {FIX}",
                    source=self.source,
                    line=line,
                )
            return 1, len(text), 1
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = list(node.value)
        values, chars, height = 1, 0, 1
        self.open.add(id(node))
        for child in children:
            more, size, below = self.node(child, level + 1)
            values, chars, height = values + more, chars + size, max(height, below + 1)
            if values > MAX_VALUES:
                raise SpecError(
                    f"more than {MAX_VALUES} keys and values with its aliases (*name) "
                    "expanded; write it without nesting aliases",
                    source=self.source,
                    line=line,
                )
            if chars > MAX_EXPANDED_CHARS:
                raise SpecError(
                    f"more than {MAX_EXPANDED_CHARS} characters with its aliases (*name) "
                    "expanded; write it without repeating long values",
                    source=self.source,
                    line=line,
                )
        self.open.discard(id(node))
        return values, chars, height


def _syntax_error(exc: yaml.MarkedYAMLError, text: str, source: str) -> SpecError:
    problem = exc.problem or exc.context or "unreadable"
    mark = exc.problem_mark or exc.context_mark
    unnamed = problem == "found character that cannot start any token"
    if unnamed and mark is not None and 0 <= mark.index < len(text):
        # libyaml leaves the character out (PyYAML names it): a tab is the usual one.
        problem = f"found character {text[mark.index]!r} that cannot start any token"
    if exc.context_mark is not None and mark is not None and mark.index >= len(text.rstrip()):
        # The file ended inside a bracket or quote: the useful line is where it opened.
        return YamlSyntaxError(
            f"not valid YAML: the file ends before this is closed ({exc.context}: {problem}); "
            "close the bracket or quote",
            source=source,
            line=exc.context_mark.line + 1,
        )
    return YamlSyntaxError(
        f"not valid YAML: {problem} (check indentation, quoting and ':' after each key)",
        source=source,
        line=None if mark is None else mark.line + 1,
    )


def _walk(
    node: yaml.Node, path: tuple[str, ...], lines: LineMap, source: str, open_: set[int]
) -> None:
    # _Measure has refused documents that hold themselves or expand past the limits,
    # so following aliases here visits at most MAX_VALUES nodes.
    if id(node) in open_:
        return
    open_.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:  # `<<: *defaults` may repeat keys on purpose
                continue
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise SpecError(
                    f"duplicate key '{clip(key)}' (first given on line {seen[key]}); keep only one",
                    field=".".join((*path, key)),
                    source=source,
                    line=line,
                )
            seen[key] = line
            lines[(*path, key)] = line
            _walk(value_node, (*path, key), lines, source, open_)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, str(index))] = item.start_mark.line + 1
            _walk(item, (*path, str(index)), lines, source, open_)
    open_.discard(id(node))
