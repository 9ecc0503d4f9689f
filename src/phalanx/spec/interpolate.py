"""``${{inputs.x}}`` and ``${{outputs.y}}`` in a command, as Azure ML writes them.

The loader checks every reference names a declared input or output; the runner
calls :func:`interpolate` at launch, once each input and output has a value
(a literal, or the local path where the data was mounted or downloaded).

The command is a shell string that ``bash -c`` runs, so how a value goes in
depends on whose it is:

- A literal input (``epochs: 3``, a string the user wrote) is pasted as written,
  as Azure ML does: with ``opts: "-v -x"``, ``${{inputs.opts}}`` is two
  arguments. A user who wants one quotes it in the command.
- A path or URI phalanx made (an output's folder, ``checkpoints``, a data input
  downloaded, mounted, local, or passed ``direct``) reaches the command as one
  word whatever it holds (a space in ``PHALANX_HOME``, a quote), quoted for
  where it sits: bare, it is shell-quoted (``'/ml work/out'``); inside ``"…"``
  its ``"``, ``$``, backquote and backslash are escaped; inside ``'…'`` each of
  its ``'`` closes and reopens the quotes. So ``--out ${{outputs.m}}``,
  ``--out "${{outputs.m}}"`` and ``'…${{outputs.m}}…'`` all work. The scan
  follows quotes, backslashes, ``$'…'``, comments and command substitutions,
  ``$(…)`` and backquotes (``"$(dirname "${{outputs.m}}")"``); here-documents
  count as bare text.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from phalanx.errors import SpecError
from phalanx.spec.values import render_literal

#: A reference to an input or output: ``${{inputs.x}}``, ``${{ outputs.model }}``.
REFERENCE_RE = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
#: A reference to a secret the job's owner stored, in an environment variable's value:
#: ``${{secrets.HF_TOKEN}}`` (resolved as the job starts: :mod:`phalanx.storage.usersecrets`).
SECRET_RE = re.compile(r"\$\{\{\s*secrets\.([A-Za-z][A-Za-z0-9_-]*)\s*\}\}")
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
    literals: Collection[str] = (),
    field: str = "command",
) -> str:
    """Replace each ``${{inputs.x}}`` / ``${{outputs.y}}`` in ``text`` with its value.

    Args:
        text: The command as written in the spec.
        inputs: Value of each input: a literal rendered with
            :func:`~phalanx.spec.values.render_literal` (``true``, ``3``), or a
            local path or URI for data.
        outputs: Local path (or URI) of each output.
        literals: Names of the inputs that are values the user wrote: pasted as
            written. Every other input and every output is a path or URI phalanx
            resolved, quoted for the shell where it sits (module docstring).
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
    contexts = quoting_contexts(text)

    def value_of(match: re.Match[str]) -> str:
        kind, name = match.groups()
        value = (inputs if kind == "inputs" else outputs)[name]
        if kind == "inputs" and name in literals:
            # Tolerate unrendered literals from callers that skip render_literal.
            return value if isinstance(value, str) else render_literal(value)
        return quote_within(contexts.get(match.start(), (BARE,)), str(value))

    return REFERENCE_RE.sub(value_of, text)


BARE, SINGLE, DOUBLE, ANSI, BACKQUOTE = "bare", "single", "double", "ansi", "backquote"
"""Where a reference sits: bare, in ``'…'``, ``"…"``, ``$'…'``, or between backquotes."""


def quote_for(context: str, value: str) -> str:
    """``value`` written so that, where it sits (``context``), the shell reads it as is."""
    if context == SINGLE:
        return value.replace("'", "'\\''")
    if context == ANSI:
        return value.replace("\\", "\\\\").replace("'", "\\'")
    if context == DOUBLE:
        return re.sub(r'([\\"$`])', r"\\\1", value)
    return shlex.quote(value)


def quote_within(contexts: tuple[str, ...], value: str) -> str:
    """``value`` written for the innermost of ``contexts`` (outermost first)."""
    text = quote_for(contexts[-1], value)
    for context in reversed(contexts):
        if context == BACKQUOTE:
            # Between backquotes, \\, \` and \$ lose their backslash before the
            # inner command is read: one more backslash for each level.
            text = re.sub(r"([\\$`])", r"\\\1", text)
    return text


@dataclass
class _Open:
    """A quoting context open at this point of the scan."""

    kind: str
    parens: int = 0
    """``(`` opened inside it (a subshell in ``$(…)``), so the ``)`` that ends it is known."""


def quoting_contexts(text: str) -> dict[int, tuple[str, ...]]:
    """The quoting each reference of ``text`` sits in (outermost first), by the offset
    where it starts.

    A small scan of bash's quoting, enough for command lines: ``\\`` escapes,
    ``'…'``, ``$'…'``, ``"…"``, ``#`` comments, and ``$(…)`` / backquotes, which
    start afresh inside double quotes. References in a comment are left out.
    """
    found: dict[int, tuple[str, ...]] = {}
    stack = [_Open(BARE)]  # innermost last
    i = 0
    while i < len(text):
        frame = stack[-1]
        kind = frame.kind
        reference = REFERENCE_RE.match(text, i)
        if reference is not None:
            found[i] = tuple(f.kind for f in stack)
            i = reference.end()
            continue
        char = text[i]
        if kind == SINGLE:
            if char == "'":
                stack.pop()
        elif kind == ANSI:
            if char == "\\":
                i += 1
            elif char == "'":
                stack.pop()
        elif char == "\\":
            i += 1  # the next character is taken as it is
        elif text.startswith("$(", i):
            stack.append(_Open(BARE))
            i += 1
        elif char == "`":
            if kind == BACKQUOTE:
                stack.pop()
            else:
                stack.append(_Open(BACKQUOTE))
        elif kind == DOUBLE:
            if char == '"':
                stack.pop()
        elif text.startswith("$'", i):
            stack.append(_Open(ANSI))
            i += 1
        elif char == "'":
            stack.append(_Open(SINGLE))
        elif char == '"':
            stack.append(_Open(DOUBLE))
        elif char == "(":
            frame.parens += 1
        elif char == ")":
            if frame.parens:
                frame.parens -= 1
            elif len(stack) > 1:
                stack.pop()
        elif char == "#" and (i == 0 or text[i - 1] in " \t\n;&|()"):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        i += 1
    return found
