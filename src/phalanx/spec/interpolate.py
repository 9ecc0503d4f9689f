"""``${{inputs.x}}`` and ``${{outputs.y}}`` in a command, as Azure ML writes them.

The loader checks every reference names a declared input or output; the runner
calls :func:`interpolate` at launch, once each input and output has a value
(a literal, or the local path where the data was mounted or downloaded).
Values are inserted verbatim, without shell quoting, as Azure ML does.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from phalanx.errors import SpecError
from phalanx.spec.values import render_literal

#: A reference to an input or output: ``${{inputs.x}}``, ``${{ outputs.model }}``.
REFERENCE_RE = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# Anything that looks like an expression, to catch forms a command job cannot use.
_EXPRESSION_RE = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)


def reference_problem(
    text: str,
    inputs: Collection[str],
    outputs: Collection[str],
    builtin_outputs: Collection[str] = (),
) -> str | None:
    """What is wrong with the first bad ``${{...}}`` in ``text``, or ``None`` if nothing is.

    Args:
        text: A command (or any field that allows references).
        inputs: Names of the declared inputs.
        outputs: Names of the declared outputs.
        builtin_outputs: Outputs every job has without declaring them.
    """
    for match in _EXPRESSION_RE.finditer(text):
        expression = match.group(0)
        reference = REFERENCE_RE.fullmatch(expression)
        if reference is None:
            return (
                f"{expression} is not supported in a command job; "
                "only ${{inputs.<name>}} and ${{outputs.<name>}} are"
            )
        kind, name = reference.groups()
        declared = inputs if kind == "inputs" else outputs
        builtin = builtin_outputs if kind == "outputs" else ()
        if name not in declared and name not in builtin:
            noun = kind[:-1]
            listed = ", ".join(sorted(declared)) or "none"
            also = f"; built in: {', '.join(builtin)}" if builtin else ""
            return (
                f"{expression} names no {noun}; declared {kind}: {listed}{also} "
                f"(add it under {kind}: or fix the name)"
            )
    return None


def interpolate(
    text: str,
    inputs: Mapping[str, str],
    outputs: Mapping[str, str],
    *,
    field: str = "command",
) -> str:
    """Replace each ``${{inputs.x}}`` / ``${{outputs.y}}`` in ``text`` with its value.

    Args:
        text: The command (or other field) as written in the spec.
        inputs: Value of each input: a literal rendered with
            :func:`~phalanx.spec.values.render_literal` (``true``, ``3``), or a
            local path or URI for data.
        outputs: Local path (or URI) of each output.
        field: Field named in errors.

    Returns:
        ``text`` with every reference substituted.

    Raises:
        SpecError: A reference names an unknown input or output, or ``text``
            holds another ``${{...}}`` form.
    """
    problem = reference_problem(text, inputs.keys(), outputs.keys())
    if problem is not None:
        raise SpecError(problem, field=field)

    def value_of(match: re.Match[str]) -> str:
        kind, name = match.groups()
        value = (inputs if kind == "inputs" else outputs)[name]
        # Tolerate unrendered literals from callers that skip render_literal.
        return value if isinstance(value, str) else render_literal(value)

    return REFERENCE_RE.sub(value_of, text)
