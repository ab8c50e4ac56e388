"""``# fxls:`` directives: how a class is built and what its ``forward`` receives.

The grammar (documented in docs/directives.md)::

    # fxls: init(ARGS)                 constructor arguments, ``Class(ARGS)``
    # fxls: NAME = (DIM, ...) [DTYPE]  a tensor input; DIM is INT, SYMBOL or SYMBOL=INT
    # fxls: NAME = EXPRESSION          any other right-hand side: a Python expression
    # fxls: leaf CLASS[, CLASS...]     do not trace into these submodule classes
    # fxls: skip                       do not capture this class
    # fxls: pass CLASS[, CLASS...]     above a ``def``: a user pass to run on these classes

The same parsers back the CLI options ``--input NAME=SHAPE`` and ``--init ARGS``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Literal

from fxls.protocol.model import DimSpec, InputSpec, Span

DTYPES: dict[str, str] = {
    "float32": "float32",
    "float": "float32",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "float64": "float64",
    "double": "float64",
    "int64": "int64",
    "long": "int64",
    "int32": "int32",
    "int": "int32",
    "int16": "int16",
    "short": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
    "complex64": "complex64",
    "cfloat": "complex64",
    "complex128": "complex128",
    "cdouble": "complex128",
}
"""Accepted dtype spellings (with or without ``torch.``) -> canonical name sent to the worker."""

CANONICAL_DTYPES = sorted(set(DTYPES.values()))

DIRECTIVE_RE = re.compile(r"^\s*#\s*fxls\s*:(?P<body>.*)$")
"""A full-line comment that is a directive; ``body`` is everything after ``fxls:``."""

_IDENT = r"[A-Za-z_]\w*"
_NAME_EQ = re.compile(rf"^(?P<name>{_IDENT})\s*=(?!=)\s*(?P<rhs>.*)$", re.S)
_SHAPE = re.compile(r"^\((?P<body>[^()]*)\)\s*(?P<dtype>[^\s#]+)?\s*(?:#.*)?$", re.S)
_DIM_SYMBOL = re.compile(rf"^(?P<name>{_IDENT})(?:\s*=\s*(?P<size>-?\d+))?$")
_IDENT_ONLY = re.compile(_IDENT)
_SHAPE_CHARS = re.compile(r"[-\w.]*")
_LEAF = re.compile(r"^leaf(?:\s+(?P<names>[^#]*))?(?:#.*)?$", re.S)
_PASS = re.compile(r"^pass(?:\s+(?P<names>[^#]*))?(?:#.*)?$", re.S)
_SKIP = re.compile(r"^skip\s*(?:#.*)?$")
_INIT = re.compile(r"^init\s*\(")
_DOTTED = re.compile(rf"^{_IDENT}(?:\.{_IDENT})*$")

EXPECTED = (
    "expected `init(ARGS)`, `NAME = (DIM, ...) [dtype]`, `NAME = <expression>`, "
    "`leaf ClassName`, `skip`, or `pass ClassName` above a function"
)


class DirectiveError(ValueError):
    """A directive (or CLI ``--input``/``--init`` value) that does not parse."""


DirectiveKind = Literal["init", "input", "leaf", "skip", "pass"]
SpecSource = Literal["directive", "annotation", "cli"]


@dataclass
class Directive:
    """One parsed ``# fxls:`` line."""

    kind: DirectiveKind
    line: int = 0
    span: Span | None = None
    """The comment, from ``#`` to the end of the line."""
    init: str | None = None
    input: InputSpec | None = None
    leaf: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    """For ``pass``: the classes the function below it runs on."""


@dataclass
class Directives:
    """All directives of one class, merged (later lines win for the same input)."""

    items: list[Directive] = field(default_factory=list)
    init: str | None = None
    init_line: int | None = None
    inputs: dict[str, InputSpec] = field(default_factory=dict)
    leaf: list[str] = field(default_factory=list)
    skip: bool = False


def _shape_like(item: str) -> bool:
    """``B``, ``3``, ``B = 2``, ``T.max``: names and numbers only. Linear in ``item`` (the
    single regular expression it replaces was quadratic in runs of whitespace)."""
    text = item.strip()
    name, eq, rest = text.partition("=")
    if eq and _IDENT_ONLY.fullmatch(name.rstrip()):
        text = rest.lstrip()
    return _SHAPE_CHARS.fullmatch(text) is not None


def parse_dims(body: str) -> list[DimSpec]:
    """``B=2, 3, T`` (the inside of the parentheses) -> DimSpecs; raises DirectiveError."""
    items = [item.strip() for item in body.split(",")]
    if items and items[-1] == "" and len(items) > 1:
        items.pop()  # trailing comma: (T,)
    if items == [""]:
        return []  # () : a 0-d tensor
    dims: list[DimSpec] = []
    for item in items:
        if re.fullmatch(r"\d+", item):
            dims.append(DimSpec(None, int(item)))
            continue
        m = _DIM_SYMBOL.match(item)
        if m is None:
            shown = item or "an empty dimension"
            raise DirectiveError(
                f"`{shown}` is not a dimension; expected an integer, a NAME or NAME=INT"
            )
        size = m.group("size")
        if size is not None and int(size) < 0:
            raise DirectiveError(f"`{item}`: a dimension size cannot be negative")
        dims.append(DimSpec(m.group("name"), int(size) if size is not None else None))
    return dims


def parse_dtype(text: str) -> str:
    """``int64`` / ``torch.long`` -> canonical dtype name; raises DirectiveError."""
    name = text.removeprefix("torch.")
    if name not in DTYPES:
        raise DirectiveError(
            f"unknown dtype `{text}`; expected one of {', '.join(CANONICAL_DTYPES)}"
        )
    return DTYPES[name]


def _is_expression(text: str) -> str | None:
    """None when ``text`` is a valid Python expression, else the syntax error message."""
    try:
        ast.parse(text, mode="eval")
    except SyntaxError as exc:
        return exc.msg
    except ValueError as exc:  # null bytes
        return str(exc)
    return None


def parse_rhs(
    name: str, rhs: str, *, source: SpecSource = "directive", line: int | None = None
) -> InputSpec:
    """The right-hand side of ``NAME = ...`` -> InputSpec (shape or expression)."""
    rhs = rhs.strip()
    if not rhs or rhs.startswith("#"):
        raise DirectiveError(f"`{name} =` needs a shape like `(B, 3, 224, 224)` or an expression")
    shape_error: DirectiveError | None = None
    m = _SHAPE.match(rhs)
    if m is not None:
        try:
            dims = parse_dims(m.group("body"))
            dtype = parse_dtype(m.group("dtype")) if m.group("dtype") else None
        except DirectiveError as exc:
            items = m.group("body").split(",")
            if all(_shape_like(item) for item in items):
                raise  # names and numbers only: clearly meant as a shape
            shape_error = exc
        else:
            return InputSpec(
                name=name, kind="shape", dims=dims, dtype=dtype, source=source, line=line
            )
    syntax = _is_expression(rhs)
    if syntax is None:
        return InputSpec(name=name, kind="expr", expr=rhs, source=source, line=line)
    if shape_error is not None:
        raise shape_error
    if rhs.startswith("("):
        raise DirectiveError(
            f"`{rhs}` is neither a shape like `(B=2, 3, 224, 224) [dtype]` "
            f"nor a Python expression ({syntax})"
        )
    raise DirectiveError(f"`{rhs}` is not a Python expression ({syntax})")


def parse_init_args(args: str) -> str:
    """Validate constructor argument text (``a=1, b=Config()``) and return it stripped."""
    args = args.strip()
    call = f"_f({args}\n)"
    syntax = _is_expression(call)
    if syntax is not None:
        raise DirectiveError(f"`{args}` are not valid call arguments ({syntax})")
    node = ast.parse(call, mode="eval").body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise DirectiveError(f"`{args}` are not valid call arguments")
    return args


def _parse_init(body: str) -> str:
    """``init(ARGS)`` (possibly with a trailing comment) -> ARGS."""
    rest = body[len("init") :]
    text = "_f" + rest
    syntax = _is_expression(text)
    if syntax is not None:
        raise DirectiveError(f"`{body}`: expected `init(ARGS)` with valid arguments ({syntax})")
    node = ast.parse(text, mode="eval").body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise DirectiveError(f"`{body}`: expected `init(ARGS)` and nothing after it")
    segment = ast.get_source_segment(text, node) or ""
    return segment[len("_f(") : -1].strip()


def parse_directive(body: str, *, line: int = 0, span: Span | None = None) -> Directive:
    """The text after ``# fxls:`` -> Directive; raises DirectiveError with what was expected."""
    body = body.strip()
    if not body:
        raise DirectiveError(f"empty directive; {EXPECTED}")
    if _SKIP.match(body):
        return Directive("skip", line, span)
    if _INIT.match(body):
        return Directive("init", line, span, init=_parse_init(body))
    m = _NAME_EQ.match(body)
    if m is not None:
        spec = parse_rhs(m.group("name"), m.group("rhs"), line=line or None)
        return Directive("input", line, span, input=spec)
    m = _LEAF.match(body)
    if m is not None:
        names = _class_names(
            m.group("names"), "`leaf` needs a class name, e.g. `# fxls: leaf Attention`"
        )
        return Directive("leaf", line, span, leaf=[n.rsplit(".", 1)[-1] for n in names])
    m = _PASS.match(body)
    if m is not None:
        names = _class_names(m.group("names"), "`pass` needs a class name, e.g. `# fxls: pass Net`")
        for n in names:
            if "." in n:
                raise DirectiveError(f"`{n}`: name a class of this file, without a module prefix")
        return Directive("pass", line, span, classes=names)
    raise DirectiveError(f"`{body}` is not a directive; {EXPECTED}")


def _class_names(text: str | None, missing: str) -> list[str]:
    names = [n for n in re.split(r"[,\s]+", (text or "").strip()) if n]
    if not names:
        raise DirectiveError(missing)
    for n in names:
        if not _DOTTED.match(n):
            raise DirectiveError(f"`{n}` is not a class name")
    return names


def parse_input_spec(text: str, *, source: SpecSource = "cli") -> InputSpec:
    """``x=(B, 3, 224, 224)`` / ``tokens=(B, T) int64`` / ``mask=None`` -> InputSpec."""
    m = _NAME_EQ.match(text.strip())
    if m is None:
        raise DirectiveError(f"`{text}`: expected NAME=SHAPE, e.g. `x=(B, 3, 224, 224)`")
    return parse_rhs(m.group("name"), m.group("rhs"), source=source)


def parse_init(text: str) -> str:
    """CLI ``--init``: ``n_layer=2, d=64`` or ``init(n_layer=2, d=64)`` -> argument text."""
    stripped = text.strip()
    if _INIT.match(stripped):
        try:
            return _parse_init(stripped)
        except DirectiveError:
            pass  # maybe a positional argument that is a call named init(...)
    return parse_init_args(stripped)


def merge(items: list[Directive]) -> Directives:
    """Combine a class's directives in order; duplicates are reported by the caller."""
    merged = Directives(items=list(items))
    for d in items:
        if d.kind == "skip":
            merged.skip = True
        elif d.kind == "init":
            merged.init, merged.init_line = d.init, d.line
        elif d.kind == "leaf":
            merged.leaf.extend(n for n in d.leaf if n not in merged.leaf)
        elif d.kind == "input" and d.input is not None:
            merged.inputs[d.input.name] = d.input
    return merged
