"""``--set key=value``: change the YAML document before it is validated.

``--set inputs.epochs=3 --set resources.instance_count=2`` walks the dotted
key into the document, creating missing mappings on the way, and stores the
value as YAML reads it (``3`` is an int, ``true`` a bool, ``[1,2]`` a list).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from phalanx.errors import SpecError
from phalanx.limits import clip
from phalanx.spec.values import show
from phalanx.spec.yamldoc import YamlSyntaxError, load_yaml

_FORM = "use --set key.path=value, e.g. --set resources.instance_count=2"


def parse_override(item: str, source: str | None = None) -> tuple[tuple[str, ...], Any]:
    """Split ``a.b=value`` into ``("a", "b")`` and the YAML-parsed value.

    Args:
        item: One ``--set`` argument.
        source: The spec file, named in errors.

    Raises:
        SpecError: No ``=``, an empty key or key part, or a value over the limits of
            :mod:`phalanx.spec.yamldoc` (a control character, an alias bomb).
    """
    key, sep, text = item.partition("=")
    path = tuple(part.strip() for part in key.split("."))
    if not sep or not key.strip() or not all(path):
        raise SpecError(f"'{item}' is not a key=value pair; {_FORM}", field="--set", source=source)
    try:
        value = load_yaml(text, "--set")
    except YamlSyntaxError:
        # `--set command=python train.py --x: 1` is text the user meant literally.
        value = text
    except SpecError as exc:
        raise SpecError(f"'{clip(item)}': {exc.message}", field="--set", source=source) from None
    return path, value


def apply_overrides(
    data: dict[str, Any], items: Sequence[str], source: str | None = None
) -> dict[tuple[str, ...], str]:
    """Apply ``--set`` items to ``data`` in place, later items winning.

    Args:
        data: The YAML document.
        items: ``--set`` arguments, in order.
        source: The spec file, named in errors.

    Returns:
        Each overridden path → the item that set it, so errors can say where a
        value came from.

    Raises:
        SpecError: A malformed item, or a key path through a value that is not
            a mapping.
    """
    applied: dict[tuple[str, ...], str] = {}
    for item in items:
        path, value = parse_override(item, source)
        node = data
        for depth, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if child is None:  # `outputs:` left empty in the YAML
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(path[: depth + 1])
                raise SpecError(
                    f"cannot set '{'.'.join(path)}': '{where}' is {show(child)}, "
                    f"not a mapping; {_FORM}",
                    field="--set",
                    source=source,
                )
            node = child
        node[path[-1]] = value
        applied[path] = item
    return applied
