"""Shapes after an operation that fixed a named dimension to its example size.

Some operations fix a named dimension to its example size while shapes are computed:
``F.interpolate`` on fake tensors, ``len(x)``, ``int(x.size(0))``, a state built for one batch
size. After such a node every shape prints the number (``[2, 3, 64, 64]``) where the user's
name belongs, and the number is right for that example only. A run that cannot keep names at
all (a kernel without symbolic sizes) prints every named dimension as a number.

:func:`generalize` computes the shapes again with other example sizes for those names and
compares them, dimension by dimension:

- the same in every run: kept as it is (``64``);
- ``a*X + c`` for a fixed name ``X`` (``a`` and ``c`` in the other names, integer
  coefficients): shown as that expression (``B``, ``2*B``, ``B*T``); anything but ``X``
  itself, or any fit when several names were fixed, must also hold in a third run;
- anything else, or a node another run did not reach: the node keeps its numbers and is
  listed as holding for the example sizes only (``Generalized.bound``).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fxls.protocol.model import Dim, Value
from fxls.worker.capture.shapes.values import size_text, tidy

__all__ = [
    "Generalized",
    "Rerun",
    "Runner",
    "generalize",
    "other_sizes",
    "pinned",
    "resized",
    "telling_step",
]


@dataclass
class Rerun:
    """The shapes of one run at other example sizes."""

    sizes: dict[str, int]
    """The example size of each fixed name in this run."""
    values: dict[str, list[Value]] = field(default_factory=dict)
    """Node name -> outputs, as :class:`~fxls.worker.capture.shapes.propagation.Propagation`
    has them; nodes the run did not reach (or made otherwise) are absent."""
    error: str | None = None
    """Where the run stopped: the failing node's name, or a short reason."""


Runner = Callable[[dict[str, int]], Rerun]
"""Runs the same graph (or ``forward``) with the given example sizes for the fixed names."""


@dataclass
class Generalized:
    values: dict[str, list[Value]]
    """The first run's values, each dimension that follows a fixed name written in it."""
    bound: list[str]
    """Nodes whose shapes (numbers) hold for the first run's example sizes only."""
    reruns: list[Rerun]
    """The runs made to find out (one or two)."""


def resized(example: Any, sizes: Mapping[str, int]) -> Any:
    """An example input (``ExampleInput``, ``PlannedInput``) with other example sizes for the
    named dimensions in ``sizes``; the same object when it has none of them."""
    inner = getattr(example, "inner_dims", None)
    if example.kind != "tensor" and inner:  # tensors inside a value (``cos, sin``)
        changed = [[(n, sizes.get(n, s) if n else s) for n, s in dims] for dims in inner]
        return dataclasses.replace(example, inner_dims=changed)
    if example.kind != "tensor" or not any(name in sizes for name, _ in example.dims):
        return example
    dims = [(name, sizes.get(name, size) if name else size) for name, size in example.dims]
    return dataclasses.replace(example, dims=dims)


def other_sizes(fixed: Mapping[str, int], step: int) -> dict[str, int]:
    """Example sizes for the ``step``-th other run: each name its own steps (``B``: 2, 3, 4;
    ``T``: 8, 10, 16), never along one line, so that one name's dimensions never fit another's
    (``T`` is not ``2*B + 4`` through all three runs)."""
    return {
        name: size + (index + 1) * step ** (index + 1)
        for index, (name, size) in enumerate(fixed.items())
    }


_CONSTRAINTS = frozenset({"Mod", "PythonMod", "FloorMod", "IsNonOverlappingAndDenseIndicator"})
"""Functions whose equality with a number constrains the names without fixing what follows
(``T % 4 == 0`` for a ``view``)."""


def pinned(guards: Sequence[Any], names: Mapping[Any, str]) -> list[tuple[list[str], Any]]:
    """The guards (sympy, from a ``ShapeEnv``) that require an expression in named dimensions
    to equal a number, as (the names in it, the expression): ``int(x.size(1) * 0.5)`` keeps
    ``T`` symbolic but requires ``TruncToInt(0.5*T) == 4``, and every size computed from that
    ``4`` holds for the example ``T`` only. Divisibility (``Mod(T, 4) == 0``) is left out."""
    out = []
    for guard in guards:
        expr = getattr(guard, "expr", guard)
        if getattr(expr, "rel_op", None) != "==" or len(getattr(expr, "args", ())) != 2:
            continue
        sides = [a for a in expr.args if not a.is_number]
        if len(sides) != 1 or type(sides[0]).__name__ in _CONSTRAINTS:
            continue
        found = sorted({names[s] for s in sides[0].free_symbols if s in names})
        if found:
            out.append((found, sides[0]))
    return out


MAX_TELLING_STEP = 8


def telling_step(
    expressions: Sequence[Any], names: Mapping[Any, str], fixed: Mapping[str, int]
) -> int:
    """The first step of :func:`other_sizes` at which each of ``expressions`` (:func:`pinned`)
    has another value than at the ``fixed`` sizes: a number that is ``int(T / 2)`` does not
    change from ``T = 8`` to ``9`` and would be taken for a constant. 1 when there are none,
    or when no step up to ``MAX_TELLING_STEP`` changes them all."""
    if not expressions:
        return 1
    symbols = {name: sym for sym, name in names.items()}

    def at(sizes: Mapping[str, int]) -> list[Any]:
        subs = {symbols[n]: v for n, v in sizes.items() if n in symbols}
        return [expr.xreplace(subs) for expr in expressions]

    try:
        first = at(fixed)
        for step in range(1, MAX_TELLING_STEP + 1):
            other = at(other_sizes(fixed, step))
            if all(a.is_number and b.is_number and a != b for a, b in zip(first, other)):
                return step
    except Exception:  # sympy may refuse an expression: the usual sizes
        return 1
    return 1


def generalize(
    first: Mapping[str, list[Value]],
    fixed: Mapping[str, int],
    run: Runner,
    first_step: int = 1,
) -> Generalized:
    """``first``'s values with the dimensions that follow the ``fixed`` names in those names.

    Args:
        first: node name -> outputs of the run that fixed the names, in graph order.
        fixed: name -> the example size it was fixed to.
        run: computes the same shapes at other sizes of the fixed names (never raises).
        first_step: the :func:`other_sizes` step of the second run (the third takes the
            next): a larger one where the nearest sizes would not change what was fixed.
    """
    names = list(fixed)
    second = run(other_sizes(fixed, first_step))
    sizes = [dict(fixed), second.sizes]
    merged: dict[str, list[Value]] = {}
    fits: dict[str, list[_ValueFit]] = {}
    bound: list[str] = []
    for node, values in first.items():
        merged[node] = values
        raw = second.values.get(node)
        other = _at(raw, second.sizes)
        if raw == values or other == values:
            continue
        if other is None or len(other) != len(values):
            if not _trusted(values, names):
                bound.append(node)
            continue
        # a name pinned through an expression (``pinned``) stays a name in every run: compare
        # its sizes, as for the numbers of a name that was replaced
        mine = _at(values, fixed) or values
        fits[node] = [_fit_value(a, b, sizes, names) for a, b in zip(mine, other)]
    reruns = [second]
    if any(not f.settled() for found in fits.values() for f in found):
        third = run(other_sizes(fixed, first_step + 1))
        reruns.append(third)
        for node, found in fits.items():
            checked = _at(third.values.get(node), third.sizes)
            if checked is None or len(checked) != len(found):
                for fit in found:
                    fit.give_up()
                continue
            for fit, value in zip(found, checked):
                fit.check(value, third.sizes)
    for node, found in fits.items():
        merged[node] = [f.value() for f in found]
        if any(f.lost() for f in found):
            bound.append(node)
    order = {name: index for index, name in enumerate(first)}
    bound.sort(key=order.__getitem__)
    return Generalized(merged, bound, reruns)


# -- fitting ------------------------------------------------------------------------------


def _at(values: list[Value] | None, sizes: Mapping[str, int]) -> list[Value] | None:
    """A rerun's values with its fixed names replaced by their sizes there: a run at other
    sizes may keep a name its first run fixed (``view(2, -1)`` fixes ``B`` at 2, not at 3)."""
    if values is None:
        return None
    out = []
    for value in values:
        dims = _dims_of(value)
        if dims is None or not any(isinstance(d, str) for d in dims):
            out.append(value)
            continue
        evaluated: list[Dim] = []
        for dim in dims:
            expr = _to_sympy(dim) if isinstance(dim, str) else None
            if expr is not None and any(str(s) in sizes for s in expr.free_symbols):
                dim = _dim(expr.subs(_symbols_for(expr, sizes)))
            evaluated.append(dim)
        out.append(_with_dims(value, evaluated))
    return out


def _trusted(values: Sequence[Value], names: Sequence[str]) -> bool:
    """Values another run has no answer for that are still right: rendered before any name
    was fixed (they mention one), or holding no number that could be a fixed size."""
    numbers = False
    for value in values:
        if value.kind in ("tensor", "size") and value.shape is not None:
            for dim in value.shape:
                if isinstance(dim, str) and any(_mentions(dim, n) for n in names):
                    return True
                numbers = numbers or isinstance(dim, int)
        elif value.kind in ("int", "float", "bool"):
            numbers = True
    return not numbers


def _mentions(text: str, name: str) -> bool:
    with contextlib.suppress(SyntaxError, ValueError, RecursionError, MemoryError):
        return any(
            isinstance(n, ast.Name) and n.id == name for n in ast.walk(ast.parse(text, "eval"))
        )
    return False


@dataclass
class _DimFit:
    """One dimension: its first-run value, and what it is in the names when known
    (``dim``), or expressions the third run must confirm (``candidates``)."""

    first: Dim
    dim: Dim | None = None
    candidates: list[Any] = field(default_factory=list)
    """sympy expressions in the names; the first that holds in the third run is it."""

    def check(self, found: Dim, sizes: Mapping[str, int]) -> None:
        """Keep what the third run (``found`` at ``sizes``) confirms; forget the rest."""
        if self.dim is not None and found == self.dim:
            return
        value = _to_sympy(found)
        options = [_to_sympy(self.dim)] if self.dim is not None else self.candidates
        self.dim, self.candidates = None, []
        if value is None:
            return
        for expr in options:
            if expr is not None and _equal(expr.subs(_symbols_for(expr, sizes)), value):
                self.dim = _dim(expr)
                return


@dataclass
class _ValueFit:
    """One value of a node: per dimension, how it follows the names; or ``None`` dims when
    the runs' values cannot be compared (another kind, rank or dtype)."""

    base: Value
    dims: list[_DimFit] | None

    def settled(self) -> bool:
        return self.dims is None or not any(d.candidates for d in self.dims)

    def lost(self) -> bool:
        """Whether a dimension (or the whole value) stays the first run's number."""
        return self.dims is None or any(d.dim is None for d in self.dims)

    def give_up(self) -> None:
        for dim in self.dims or []:
            if dim.candidates:
                dim.candidates = []

    def value(self) -> Value:
        if not self.dims:  # no dimensions to follow (``None`` in both runs, a flag)
            return self.base
        return _with_dims(self.base, [d.first if d.dim is None else d.dim for d in self.dims])

    def check(self, found: Value, sizes: Mapping[str, int]) -> None:
        dims = _dims_of(found) if found.kind == self.base.kind else None
        if self.dims is None:
            return
        if dims is None or found.dtype != self.base.dtype or len(dims) != len(self.dims):
            self.dims = None
            return
        for fit, dim in zip(self.dims, dims):
            fit.check(dim, sizes)


def _with_dims(base: Value, dims: list[Dim]) -> Value:
    if base.kind == "tensor":
        return Value(kind="tensor", shape=dims, dtype=base.dtype, text=base.text)
    if base.kind == "size":
        return Value(kind="size", shape=dims, text=size_text(dims))
    return Value(kind=base.kind, text=str(dims[0]))


def _dims_of(value: Value) -> list[Dim] | None:
    if value.kind in ("tensor", "size"):
        return list(value.shape) if value.shape is not None else None
    if value.kind == "int" and value.text is not None:
        return [int(value.text)] if value.text.lstrip("-").isdecimal() else [value.text]
    return None


def _fit_value(
    a: Value, b: Value, sizes: Sequence[Mapping[str, int]], names: Sequence[str]
) -> _ValueFit:
    """How ``a`` (first run) and ``b`` (second run) follow the fixed names."""
    first, second = _dims_of(a), _dims_of(b)
    if a == b:
        return _ValueFit(a, [_DimFit(d, d) for d in first] if first is not None else [])
    if a.kind != b.kind or a.dtype != b.dtype:
        return _ValueFit(a, None)
    if first is None or second is None or len(first) != len(second):
        return _ValueFit(a, None)
    return _ValueFit(a, [_fit_dim(d1, d2, sizes, names) for d1, d2 in zip(first, second)])


def _fit_dim(d1: Dim, d2: Dim, sizes: Sequence[Mapping[str, int]], names: Sequence[str]) -> _DimFit:
    """What ``d1`` (first run) and ``d2`` (second run) are in the fixed names: ``a*X + c``
    for one name ``X``, or ``k`` times a product of names (``H*W``); settled at once when it
    is the same in both runs, or is the one fixed name itself."""
    import sympy

    if d1 == d2:
        return _DimFit(d1, d1)
    e1, e2 = _to_sympy(d1), _to_sympy(d2)
    if e1 is None or e2 is None:
        return _DimFit(d1)
    candidates = []
    for name in names:
        x1, x2 = sizes[0][name], sizes[1][name]
        symbol = _symbol(name)
        try:
            slope = sympy.simplify((e2 - e1) / (x2 - x1))
            offset = sympy.simplify(e1 - slope * x1)
        except Exception:  # sympy may refuse odd expressions: no fit
            continue
        if slope == 0 or not (_integral(slope) and _integral(offset)):
            continue
        if symbol in slope.free_symbols or symbol in offset.free_symbols:
            continue
        if len(names) == 1 and slope == 1 and offset == 0:
            return _DimFit(d1, name)
        candidates.append(slope * symbol + offset)
    candidates.extend(_floor_candidates(e1, e2, sizes, names))
    for size in (2, 3):
        for group in itertools.combinations(names, size):
            p1 = math.prod(sizes[0][n] for n in group)
            p2 = math.prod(sizes[1][n] for n in group)
            try:
                factor = sympy.simplify(e1 / p1)
                same = sympy.simplify(e2 / p2 - factor) == 0
            except Exception:
                continue
            if same and factor != 0 and _integral(factor):
                candidates.append(factor * math.prod(_symbol(n) for n in group))
    return _DimFit(d1, candidates=candidates)


MAX_DIVISOR = 16


def _floor_candidates(
    e1: Any, e2: Any, sizes: Sequence[Mapping[str, int]], names: Sequence[str]
) -> list[Any]:
    """``X//k`` for a fixed name ``X`` whose two sizes give the two numbers (``int(T * 0.5)``,
    ``h.shape[1] // 2`` passed on as a number); the third run must confirm it."""
    import sympy

    if not (e1.is_Integer and e2.is_Integer):
        return []
    out = []
    for name in names:
        x1, x2 = sizes[0][name], sizes[1][name]
        for k in range(2, MAX_DIVISOR + 1):
            if x1 // k == int(e1) and x2 // k == int(e2) and x1 // k != x2 // k:
                out.append(sympy.floor(_symbol(name) / k))
    return out


_FLOOR = re.compile(r"floor\(([A-Za-z_]\w*)/(\d+)\)")


def _integral(expr: Any) -> bool:
    import sympy

    return all(n.is_integer for n in expr.atoms(sympy.Number))


def _equal(a: Any, b: Any) -> bool:
    import sympy

    try:
        return bool(sympy.simplify(a - b) == 0)
    except Exception:
        return False


def _dim(expr: Any) -> Dim:
    if expr.is_Integer:
        return int(expr)
    text = str(expr)
    floor = _FLOOR.fullmatch(text)
    if floor is not None:
        return f"{floor[1]}//{floor[2]}"
    return tidy(text)


_SYMBOLS: dict[str, Any] = {}


def _symbol(name: str) -> Any:
    found = _SYMBOLS.get(name)
    if found is None:
        import sympy

        found = _SYMBOLS[name] = sympy.Symbol(name, integer=True, positive=True)
    return found


def _symbols_for(expr: Any, sizes: Mapping[str, int]) -> dict[Any, int]:
    return {s: sizes[str(s)] for s in expr.free_symbols if str(s) in sizes}


def _to_sympy(dim: Dim) -> Any:
    """A dimension (``8``, ``"2*T"``, ``"(H - 1)//4 + 1"``) as a sympy expression in the names,
    or None. Only arithmetic on names and integers is read (the text is never evaluated)."""
    import sympy

    if isinstance(dim, int):
        return sympy.Integer(dim)
    try:
        tree = ast.parse(dim, mode="eval")
        return _convert(tree.body, 0)
    except (SyntaxError, ValueError, RecursionError, MemoryError, _Unreadable):
        return None


class _Unreadable(Exception):
    """A part of a dimension's text that is not arithmetic on names and integers."""


def _convert(node: ast.AST, depth: int) -> Any:
    import sympy

    if depth > 30:
        raise _Unreadable
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sympy.Integer(node.value)
    if isinstance(node, ast.Name):
        return _symbol(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_convert(node.operand, depth + 1)
    if isinstance(node, ast.BinOp):
        left, right = _convert(node.left, depth + 1), _convert(node.right, depth + 1)
        op = node.op
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.FloorDiv):
            return sympy.floor(left / right)
        if isinstance(op, ast.Mod):
            return sympy.Mod(left, right)
        if isinstance(op, ast.Pow) and right.is_Integer and 0 <= int(right) <= 8:
            return left**right
    raise _Unreadable
