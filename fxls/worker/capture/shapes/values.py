"""Values in the user's words: SymInts and symbolic sizes printed with the dimension names."""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from fxls.protocol.model import Dim, Value

MISSING = object()
"""A node's value not computed (yet)."""


class Namer:
    """Renders SymInts and symbolic expressions in the user's dimension names."""

    def __init__(self, names: dict[Any, str] | None = None) -> None:
        self.names: dict[Any, str] = names or {}
        """sympy Symbol -> user's name."""
        self._by_text = {str(sym): name for sym, name in self.names.items()}
        self._cache: dict[Any, str] = {}

    def expr(self, expr: Any) -> Dim:
        """A sympy expression (or int) -> int, or readable text in user names."""
        if isinstance(expr, int):
            return expr
        if getattr(expr, "is_Integer", False) or getattr(expr, "is_number", False):
            try:
                return int(expr)
            except TypeError:
                return str(expr)
        text = self._cache.get(expr)
        if text is None:
            text = self._render(expr)
            self._cache[expr] = text
        return text

    def _render(self, expr: Any) -> str:
        mapping = {}
        for sym in expr.free_symbols:
            name = self.names.get(sym)
            if name is None:
                raw = str(sym)
                # unbacked symbols (data-dependent values, after nonzero or .item()) print as "?"
                name = "?" if raw.startswith(("u", "zuf", "zf")) else raw
            elif not name.isidentifier() and expr != sym:
                name = f"({name})"  # a product a parent passed (``B*T``) inside an expression
            # the symbol's own class (sympy's Symbol, via torch: no import of sympy here)
            mapping[sym] = type(sym)(name, integer=True, positive=True)
        return tidy(str(expr.xreplace(mapping)))

    def dim(self, d: Any) -> Dim:
        if isinstance(d, torch.SymInt):
            node = d.node
            if node.is_nested_int() if hasattr(node, "is_nested_int") else False:
                return str(d)
            expr = node.expr
            shape_env = getattr(node, "shape_env", None)
            if shape_env is not None:
                with contextlib.suppress(Exception):
                    expr = shape_env.replace(expr)
            return self.expr(expr)
        return int(d)

    def scalar(self, v: Any) -> str:
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            node = v.node
            if isinstance(v, torch.SymInt):
                return str(self.dim(v))
            try:
                return str(self.expr(node.expr))
            except Exception:
                return str(v)
        return repr(v)

    def text(self, message: str) -> str:
        """Rename raw symbols (``s26``) inside a message to the user's names."""
        if not self._by_text:
            return message
        return re.sub(r"\bs\d+\b", lambda m: self._by_text.get(m.group(0), m.group(0)), message)


def tidy(text: str) -> str:
    """Normalize parentheses: ``(((H - 1)//4)) + 1`` -> ``(H - 1)//4 + 1``."""
    if "(" not in text:
        return text
    try:
        unparsed = ast.unparse(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError):
        return text
    return re.sub(r" (\*\*|\*|//|/) ", r"\1", unparsed)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dims_of(t: torch.Tensor, namer: Namer) -> list[Dim]:
    return [namer.dim(d) for d in t.shape]


def size_text(dims: Sequence[Dim]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def values_of(obj: Any, namer: Namer | None = None) -> list[Value]:
    """Flatten a node's example value into protocol ``Value`` entries."""
    namer = namer or Namer()
    out: list[Value] = []
    _flatten(obj, namer, out, 0)
    return out


def _flatten(obj: Any, namer: Namer, out: list[Value], depth: int) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(Value(kind="tensor", shape=dims_of(obj, namer), dtype=dtype_name(obj.dtype)))
    elif isinstance(obj, torch.Size):
        dims = [namer.dim(d) for d in obj]
        out.append(Value(kind="size", shape=dims, text=size_text(dims)))
    elif isinstance(obj, (bool, torch.SymBool)):
        out.append(Value(kind="bool", text=namer.scalar(obj)))
    elif isinstance(obj, (int, torch.SymInt)):
        out.append(Value(kind="int", text=namer.scalar(obj)))
    elif isinstance(obj, (float, torch.SymFloat)):
        out.append(Value(kind="float", text=namer.scalar(obj)))
    elif obj is None:
        out.append(Value(kind="none", text="None"))
    elif isinstance(obj, torch.dtype):
        out.append(Value(kind="dtype", text=str(obj)))
    elif isinstance(obj, torch.device):
        out.append(Value(kind="device", text=str(obj)))
    elif isinstance(obj, (tuple, list)) and depth < 8:
        for item in obj:
            _flatten(item, namer, out, depth + 1)
    elif isinstance(obj, dict) and depth < 8:
        for item in obj.values():
            _flatten(item, namer, out, depth + 1)
    elif isinstance(obj, str):
        out.append(Value(kind="other", text=repr(obj)[:80]))
    else:
        out.append(Value(kind="other", text=type(obj).__name__))
