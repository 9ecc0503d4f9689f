"""YAML text → plain data plus the line of every key.

PyYAML's ``safe_load`` forgets where things were and silently keeps the last
of two equal keys; composing the node tree first keeps both facts.
"""

from __future__ import annotations

from typing import Any

import yaml

from phalanx.errors import SpecError

#: Field path (``("resources", "instance_count")``; list items by index as
#: ``"0"``) → 1-based line of its key (or list item).
LineMap = dict[tuple[str, ...], int]

_MERGE_TAG = "tag:yaml.org,2002:merge"


def read_yaml(text: str, source: str) -> tuple[dict[str, Any], LineMap]:
    """Parse a job spec document.

    Args:
        text: YAML text.
        source: Name of the file, for errors.

    Returns:
        The document as a dict, and the line of each field path.

    Raises:
        SpecError: Invalid YAML, a duplicate key, an empty document, or a
            document that is not a mapping.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise SpecError(
                "the job spec is empty; it needs at least a command: line", source=source
            )
        lines: LineMap = {}
        _walk(node, (), lines, source, set())
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, text, source) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"not valid YAML: {exc}", source=source) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"the single value {data!r}"
        raise SpecError(
            f"the job spec must be a mapping of key: value lines; got {kind}",
            source=source,
            line=node.start_mark.line + 1,
        )
    return data, lines


def _syntax_error(exc: yaml.MarkedYAMLError, text: str, source: str) -> SpecError:
    problem = exc.problem or exc.context or "unreadable"
    mark = exc.problem_mark or exc.context_mark
    if exc.context_mark is not None and mark is not None and mark.index >= len(text.rstrip()):
        # The file ended inside a bracket or quote: the useful line is where it opened.
        return SpecError(
            f"not valid YAML: the file ends before this is closed ({exc.context}: {problem}); "
            "close the bracket or quote",
            source=source,
            line=exc.context_mark.line + 1,
        )
    return SpecError(
        f"not valid YAML: {problem} (check indentation, quoting and ':' after each key)",
        source=source,
        line=None if mark is None else mark.line + 1,
    )


def _walk(
    node: yaml.Node, path: tuple[str, ...], lines: LineMap, source: str, open_: set[int]
) -> None:
    if id(node) in open_:  # an alias of an enclosing anchor: a recursive document
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
                    f"duplicate key '{key}' (first given on line {seen[key]}); keep only one",
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
