"""Input shapes from jaxtyping annotations on ``forward`` parameters (read from the AST).

``x: Float[Tensor, "batch 3 224 224"]`` -> a float tensor of ``(batch, 3, 224, 224)`` with
``batch`` symbolic. Variadic dimensions (``*batch``, ``...``), anonymous ones (``_``) and
expressions (``dim+1``) give no spec: fxls cannot choose a rank or size for them.
"""

from __future__ import annotations

import ast
import re

from fxls.protocol.model import DimSpec, InputSpec

DTYPE_BY_KIND: dict[str, str | None] = {
    "Float": None,
    "Float32": "float32",
    "Float16": "float16",
    "BFloat16": "bfloat16",
    "Float64": "float64",
    "Inexact": None,
    "Shaped": None,
    "Num": None,
    "Real": None,
    "Int": "int64",
    "Integer": "int64",
    "SignedInt": "int64",
    "Int64": "int64",
    "Int32": "int32",
    "Int16": "int16",
    "Int8": "int8",
    "UInt": "uint8",
    "UInt8": "uint8",
    "Bool": "bool",
    "Complex": "complex64",
    "Complex64": "complex64",
    "Complex128": "complex128",
}
"""jaxtyping dtype classes -> dtype name (None: the worker's default, float32)."""

_NAME = re.compile(r"^#?([A-Za-z][\w]*)$")


def _kind_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def parse_dims(text: str) -> list[DimSpec] | None:
    """``"batch 3 224 224"`` -> DimSpecs, or None when the string has variadic/odd dims."""
    dims: list[DimSpec] = []
    for token in text.split():
        if token.isdigit():
            dims.append(DimSpec(None, int(token)))
            continue
        m = _NAME.match(token)
        if m is None:
            return None  # *batch, ..., _, dim+1, name=...
        dims.append(DimSpec(m.group(1), None))
    return dims


def spec_from_annotation(
    name: str, annotation: ast.expr, line: int | None = None
) -> InputSpec | None:
    """An annotation node of parameter ``name`` -> InputSpec, or None if it is not jaxtyping."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value.strip(), mode="eval").body
        except SyntaxError:
            return None
    if not isinstance(annotation, ast.Subscript):
        return None
    kind = _kind_name(annotation.value)
    if kind not in DTYPE_BY_KIND:
        return None
    index = annotation.slice
    if not (isinstance(index, ast.Tuple) and len(index.elts) == 2):
        return None
    dims_node = index.elts[1]
    if not (isinstance(dims_node, ast.Constant) and isinstance(dims_node.value, str)):
        return None
    dims = parse_dims(dims_node.value)
    if dims is None:
        return None
    return InputSpec(
        name=name,
        kind="shape",
        dims=dims,
        dtype=DTYPE_BY_KIND[kind],
        source="annotation",
        line=line,
    )
