"""What the statement a failed build stopped at says about the values it wanted.

A constructor run with guessed values can stop at a statement that shows what a parameter
should have been: ``ih, iw = image_size`` or ``len(dims)`` given an int wants a sequence (as
long as ``__init__`` asserts or indexes it: ``assert len(dims) == 3``, ``channels[10]``);
``float(drop_prob)``, ``assert exists(depth)`` or ``masking_ratio > 0`` given a ``None``
default wants a value. This module finds that statement from the traceback (the innermost
frame of code that is not torch's or the standard library's, at the instruction that failed)
and reads it; :mod:`.construct` turns what it reads into a repaired recipe. Pure reading: no
user code runs here.
"""

from __future__ import annotations

import ast
import linecache
import os
import sysconfig
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import CodeType, TracebackType
from typing import Any

import torch

MAX_FRAMES = 8
"""Frames of the traceback looked at, from the innermost."""
MAX_LENGTH = 64
"""The longest sequence a repair makes (``channels[10]``: eleven)."""

_NOT_A_SEQUENCE = (
    "object of type 'int' has no len()",
    "cannot unpack non-iterable int object",
    "'int' object is not iterable",
    "'int' object is not subscriptable",
)
_TORCH = os.path.dirname(torch.__file__) + os.sep
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


@dataclass(frozen=True)
class Failed:
    """The statement a build failed at, in the frame that ran it."""

    statement: ast.stmt
    expression: ast.AST
    """What the failing instruction evaluated: the statement's value for an unpacking
    (``ih, iw = image_size``: ``image_size``), the call for ``len(dims)``, the test of an
    ``assert``."""
    function: ast.AST | None
    """The ``def`` holding the statement (where its other uses of a name are read)."""
    values: Mapping[str, Any]
    """The frame's local variables."""


def failed_statement(error: BaseException) -> Failed | None:
    """Where ``error`` was raised, in the innermost frame of code that has a source and is
    not torch's or the standard library's; None when no such frame is found."""
    frames = list(_frames(error.__traceback__))[-MAX_FRAMES:]
    for tb in reversed(frames):
        code = tb.tb_frame.f_code
        if _not_users(code.co_filename):
            continue
        found = _at(code, tb.tb_lasti)
        if found is not None:
            statement, expression, function = found
            if isinstance(statement, ast.Assert) and isinstance(error, AssertionError):
                expression = statement.test  # it stopped at its last condition
            return Failed(statement, expression, function, dict(tb.tb_frame.f_locals))
    return None


def sequences_wanted(
    failed: Failed, error: BaseException, guessed: Mapping[str, Any]
) -> dict[str, tuple[Any, ...]]:
    """The guessed values (``guessed``: parameter name -> value) that the failure shows
    should have been sequences, as sequences: an int where the statement needs a sequence
    (``len(dims)``, ``ih, iw = image_size``) repeated as often as the function asserts or
    indexes it (at least twice); a sequence an ``assert len(x) == n`` refused, of ``n``
    items."""
    wanted: dict[str, tuple[Any, ...]] = {}
    message = str(error)
    if isinstance(error, TypeError) and any(m in message for m in _NOT_A_SEQUENCE):
        for name in _names(failed.expression):
            value = failed.values.get(name)
            if type(value) is int and type(guessed.get(name)) is int:
                length = _length(failed, name) or 2
                wanted[name] = (value,) * length
    if isinstance(error, AssertionError) and isinstance(failed.statement, ast.Assert):
        for name, length in _asserted_lengths(failed.statement.test, failed.values):
            value = failed.values.get(name)
            if name in guessed and isinstance(value, (tuple, list)) and value:
                wanted[name] = (value[0],) * length
    return wanted


def nones_read(failed: Failed) -> list[str]:
    """Names the failing expression reads whose values are ``None`` (``float(drop_prob)``,
    ``assert exists(depth) and exists(heads)``), in the order written."""
    return [n for n in _names(failed.expression) if n in failed.values and failed.values[n] is None]


def _not_users(filename: str) -> bool:
    """Whether ``filename`` is torch's or the standard library's (a library installed beside
    it, under ``site-packages``, is read)."""
    if filename.startswith(_TORCH):
        return True
    return filename.startswith(_STDLIB) and "site-packages" not in filename


def _frames(tb: TracebackType | None) -> Iterator[TracebackType]:
    while tb is not None:
        yield tb
        tb = tb.tb_next


_TREES: dict[str, tuple[str, ast.Module | None]] = {}


def _tree(filename: str) -> ast.Module | None:
    """The syntax tree of ``filename``'s text as ``linecache`` has it (the document's own)."""
    text = "".join(linecache.getlines(filename))
    kept = _TREES.get(filename)
    if kept is None or kept[0] != text:
        try:
            kept = (text, ast.parse(text))
        except (SyntaxError, ValueError):
            kept = (text, None)
        _TREES[filename] = kept
    return kept[1]


def _at(code: CodeType, lasti: int) -> tuple[ast.stmt, ast.AST, ast.AST | None] | None:
    """The statement, expression and function of ``code``'s instruction at ``lasti``."""
    positions = list(code.co_positions())
    if not 0 <= lasti // 2 < len(positions):
        return None
    line, end_line, col, end_col = positions[lasti // 2]
    tree = _tree(code.co_filename)
    if tree is None or line is None:
        return None
    where = (line, end_line, col, end_col)
    return _find(tree, where, None, None)


def _find(
    node: ast.AST, where: tuple[Any, ...], statement: ast.stmt | None, function: ast.AST | None
) -> tuple[ast.stmt, ast.AST, ast.AST | None] | None:
    """The innermost node at ``where`` under ``node``, with its statement and function."""
    for child in ast.iter_child_nodes(node):
        first, last = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
        if first is None or not first <= where[0] <= (last or first):
            continue
        inner_statement = child if isinstance(child, ast.stmt) else statement
        inner_function = (
            child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
        )
        if _spans(child) == where and inner_statement is not None:
            return inner_statement, _evaluated(child, inner_statement), inner_function
        found = _find(child, where, inner_statement, inner_function)
        if found is not None:
            return found
    if isinstance(statement, ast.Assert) and isinstance(node, ast.Assert):
        return statement, statement.test, function
    return None


def _spans(node: ast.AST) -> tuple[Any, ...]:
    return (
        getattr(node, "lineno", None),
        getattr(node, "end_lineno", None),
        getattr(node, "col_offset", None),
        getattr(node, "end_col_offset", None),
    )


def _evaluated(node: ast.AST, statement: ast.stmt) -> ast.AST:
    """What the instruction at ``node`` evaluated: an unpacking's target stands for the
    value unpacked."""
    if isinstance(getattr(node, "ctx", None), ast.Store):
        if isinstance(statement, ast.Assign):
            return statement.value
        if isinstance(statement, (ast.For, ast.AsyncFor)):
            return statement.iter
    return node


def _names(node: ast.AST) -> list[str]:
    """Variable names ``node`` reads, in the order written (each once)."""
    found = (
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    )
    return list(dict.fromkeys(found))


def _length(failed: Failed, name: str) -> int | None:
    """How many items the function wants ``name`` to have: the ``n`` of an ``assert
    len(name) == n``, else one more than its highest constant index (``name[2]``)."""
    scope = failed.function or failed.statement
    highest = 0
    for node in ast.walk(scope):
        if isinstance(node, ast.Assert):
            for asserted, length in _asserted_lengths(node.test, failed.values):
                if asserted == name:
                    return length
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == name
            and isinstance(node.slice, ast.Constant)
            and type(node.slice.value) is int
        ):
            index = node.slice.value
            highest = max(highest, index + 1 if index >= 0 else -index)
    return min(highest, MAX_LENGTH) if highest > 1 else None


def _asserted_lengths(test: ast.AST, values: Mapping[str, Any]) -> Iterator[tuple[str, int]]:
    """``(name, n)`` for each ``len(name) == n`` in an assert's test (``n`` a constant or a
    local int), either way round."""
    for node in ast.walk(test):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
            continue
        if not isinstance(node.ops[0], ast.Eq):
            continue
        sides = (node.left, node.comparators[0])
        for measured, other in (sides, sides[::-1]):
            name = _len_of(measured)
            length = _int_of(other, values)
            if name is not None and length is not None and 0 < length <= MAX_LENGTH:
                yield name, length


def _len_of(node: ast.AST) -> str | None:
    """``x`` for ``len(x)``, else None."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "len"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Name)
    ):
        return node.args[0].id
    return None


def _int_of(node: ast.AST, values: Mapping[str, Any]) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and type(values.get(node.id)) is int:
        return int(values[node.id])
    return None
