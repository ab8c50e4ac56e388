"""Find the ``nn.Module`` candidate classes of a file, their ``forward`` and their directives.

Pure AST work: nothing is imported or executed. The candidate test is generous (a class with
any base that is not obviously something else); the worker confirms with ``issubclass``.
"""

from __future__ import annotations

import ast
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field

from fxls.analysis.directives import (
    DIRECTIVE_RE,
    Directive,
    DirectiveError,
    Directives,
    merge,
    parse_directive,
)
from fxls.analysis.jaxtype import spec_from_annotation
from fxls.analysis.workspace import top_level_names
from fxls.protocol.catalogue import FX403
from fxls.protocol.model import ClassRequest, Diagnostic, InputSpec, PassRequest, Span
from fxls.protocol.positions import SourceText, tokens

MODULE_BASES = frozenset(
    {
        "Module",
        "Sequential",
        "ModuleList",
        "ModuleDict",
        "ParameterList",
        "ParameterDict",
        "LightningModule",
    }
)
"""Base names that certainly are (or derive from) ``torch.nn.Module``."""

NOT_MODULE_BASES = frozenset(
    {
        "object",
        "type",
        "int",
        "float",
        "str",
        "bytes",
        "bool",
        "complex",
        "dict",
        "list",
        "tuple",
        "set",
        "frozenset",
        "BaseException",
        "Exception",
        "ValueError",
        "TypeError",
        "RuntimeError",
        "KeyError",
        "Enum",
        "IntEnum",
        "StrEnum",
        "Flag",
        "IntFlag",
        "NamedTuple",
        "TypedDict",
        "Protocol",
        "ABC",
        "Generic",
        "Function",
        "Dataset",
        "IterableDataset",
        "DataLoader",
        "Sampler",
        "Optimizer",
        "LRScheduler",
        "TestCase",
    }
)
"""Base names that certainly are not modules (``torch.autograd.Function``, datasets...)."""


@dataclass
class ForwardParam:
    """One parameter of ``forward`` (``self`` excluded)."""

    name: str
    annotation: str | None = None
    has_default: bool = False
    kind: str = "positional_or_keyword"
    """``positional_only``, ``positional_or_keyword``, ``var_positional``, ``keyword_only``,
    ``var_keyword`` (inspect.Parameter kind names, lower-case)."""
    span: Span | None = None
    input: InputSpec | None = None
    """Spec from a jaxtyping annotation, when it has one."""


@dataclass
class ForwardInfo:
    span: Span
    """From the ``def`` keyword to the end of the body."""
    name_span: Span
    params: list[ForwardParam] = field(default_factory=list)
    helpers: list[str] = field(default_factory=list)
    """Module-level functions and methods of the class that ``forward`` calls directly."""

    @property
    def accepts_any_keyword(self) -> bool:
        return any(p.kind == "var_keyword" for p in self.params)


@dataclass
class ClassInfo:
    name: str
    line: int
    """Line of the ``class`` keyword (decorators sit above it)."""
    name_span: Span
    span: Span
    """The whole statement, decorators included."""
    body: Span
    bases: list[str] = field(default_factory=list)
    certain: bool = False
    """True when a base is a known ``nn.Module`` name (directly or through a class of this file)."""
    forward: ForwardInfo | None = None
    """``forward`` defined in this class (None when inherited or missing)."""
    inherited_forward: ForwardInfo | None = None
    """``forward`` of the nearest base class defined in the same file, when not defined here."""
    directives: Directives = field(default_factory=Directives)
    inputs: list[InputSpec] = field(default_factory=list)
    """Specs for forward parameters: directives win over jaxtyping annotations."""
    passes: list[PassRequest] = field(default_factory=list)
    """User passes (``# fxls: pass`` above a function of the file) to run on this class."""

    @property
    def effective_forward(self) -> ForwardInfo | None:
        return self.forward or self.inherited_forward

    def request(self) -> ClassRequest:
        """The worker request for this class."""
        return ClassRequest(
            name=self.name,
            line=self.line,
            init=self.directives.init,
            init_line=self.directives.init_line,
            inputs=[_copy_spec(s) for s in self.inputs],
            leaf=list(self.directives.leaf),
            skip=self.directives.skip,
            passes=[PassRequest(p.function, p.line) for p in self.passes],
        )


@dataclass
class PassInfo:
    """A function marked ``# fxls: pass CLASS`` (a user pass over ``torch.fx`` graphs)."""

    function: str
    line: int
    """Line of the ``def`` keyword."""
    name_span: Span
    classes: list[str] = field(default_factory=list)
    """The classes it runs on, in the order the directives name them."""
    directive_lines: list[int] = field(default_factory=list)


@dataclass
class SyntaxErrorInfo:
    span: Span
    message: str


@dataclass
class ParseResult:
    classes: list[ClassInfo] = field(default_factory=list)
    syntax_error: SyntaxErrorInfo | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    """FX403 for directives that do not parse or are not attached to a class."""
    defined: set[str] = field(default_factory=set)
    """Names the document defines at its top level (for evidence from other files)."""
    passes: list[PassInfo] = field(default_factory=list)
    """Functions marked as user passes."""
    tree: ast.Module | None = None
    """The document's syntax tree (None with a syntax error), for later steps that read it
    (``fxls.engine.incremental.units_of``); not to be changed."""

    def find(self, name: str) -> ClassInfo | None:
        return next((c for c in self.classes if c.name == name), None)


def _copy_spec(spec: InputSpec) -> InputSpec:
    return InputSpec(
        name=spec.name,
        kind=spec.kind,
        dims=list(spec.dims),
        dtype=spec.dtype,
        expr=spec.expr,
        source=spec.source,
        line=spec.line,
    )


def _base_name(node: ast.expr) -> str | None:
    """``nn.Module`` -> ``Module``; ``Base[T]`` -> ``Base``; calls and others -> None."""
    if isinstance(node, ast.Subscript):
        return _base_name(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _top_level_classes(body: list[ast.stmt]) -> Iterator[ast.ClassDef]:
    """Classes defined at module level, also inside top-level if/try/with blocks."""
    for stmt in body:
        if isinstance(stmt, ast.ClassDef):
            yield stmt
        elif isinstance(stmt, ast.If):
            yield from _top_level_classes(stmt.body)
            yield from _top_level_classes(stmt.orelse)
        elif isinstance(stmt, ast.Try) or (
            hasattr(ast, "TryStar") and isinstance(stmt, getattr(ast, "TryStar"))  # noqa: B009
        ):
            yield from _top_level_classes(stmt.body)
            for handler in stmt.handlers:
                yield from _top_level_classes(handler.body)
            yield from _top_level_classes(stmt.orelse)
            yield from _top_level_classes(stmt.finalbody)
        elif isinstance(stmt, ast.With):
            yield from _top_level_classes(stmt.body)


def _module_functions(tree: ast.Module) -> set[str]:
    return {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _classify(defs: dict[str, ast.ClassDef]) -> dict[str, tuple[bool, bool]]:
    """Class name -> (candidate, certain), resolving bases through classes of the same file."""
    memo: dict[str, tuple[bool, bool]] = {}

    def visit(name: str, stack: frozenset[str]) -> tuple[bool, bool]:
        if name in memo:
            return memo[name]
        if name in stack:
            return (False, False)
        node = defs[name]
        candidate = certain = False
        for base in node.bases:
            base_name = _base_name(base)
            if base_name is None:
                candidate = True  # e.g. make_base(): the worker decides
            elif base_name in MODULE_BASES:
                candidate = certain = True
            elif base_name in defs and base_name != name:
                c, s = visit(base_name, stack | {name})
                candidate, certain = candidate or c, certain or s
            elif base_name not in NOT_MODULE_BASES:
                candidate = True  # imported or unknown base
        memo[name] = (candidate, certain)
        return memo[name]

    return {name: visit(name, frozenset()) for name in defs}


def _params(src: SourceText, fn: ast.FunctionDef) -> list[ForwardParam]:
    a = fn.args
    out: list[ForwardParam] = []
    positional = [*a.posonlyargs, *a.args]
    n_defaults = len(a.defaults)
    for i, arg in enumerate(positional):
        kind = "positional_only" if i < len(a.posonlyargs) else "positional_or_keyword"
        has_default = i >= len(positional) - n_defaults
        out.append(_param(src, arg, kind, has_default))
    if a.vararg:
        out.append(_param(src, a.vararg, "var_positional", False))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out.append(_param(src, arg, "keyword_only", default is not None))
    if a.kwarg:
        out.append(_param(src, a.kwarg, "var_keyword", False))
    if (
        out
        and out[0].kind in ("positional_only", "positional_or_keyword")
        and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    ):
        out.pop(0)  # self
    return out


def _param(src: SourceText, arg: ast.arg, kind: str, has_default: bool) -> ForwardParam:
    annotation = src.segment(arg.annotation) if arg.annotation else None
    spec = None
    if arg.annotation is not None and kind in (
        "positional_only",
        "positional_or_keyword",
        "keyword_only",
    ):
        spec = spec_from_annotation(arg.arg, arg.annotation, arg.lineno)
    return ForwardParam(
        name=arg.arg,
        annotation=annotation,
        has_default=has_default,
        kind=kind,
        span=src.span(arg.lineno, arg.col_offset, arg.end_lineno, arg.end_col_offset),
        input=spec,
    )


def _helpers(fn: ast.FunctionDef, functions: set[str], methods: set[str]) -> list[str]:
    found: list[str] = []
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
    for node in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
        f = node.func
        name = None
        if isinstance(f, ast.Name) and f.id in functions:
            name = f.id
        elif (
            isinstance(f, ast.Attribute)
            and isinstance(f.value, ast.Name)
            and f.value.id == "self"
            and f.attr in methods
        ):
            name = f.attr
        if name and name not in found:
            found.append(name)
    return found


def _forward(src: SourceText, node: ast.ClassDef, functions: set[str]) -> ForwardInfo | None:
    methods = {s.name for s in node.body if isinstance(s, ast.FunctionDef)}
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "forward":
            line = src.line(stmt.lineno)
            start = src.col(stmt.lineno, stmt.col_offset)
            name_col = line.find("forward", start)
            if name_col < 0:
                name_col = start
            return ForwardInfo(
                span=src.span(stmt.lineno, stmt.col_offset, stmt.end_lineno, stmt.end_col_offset),
                name_span=Span(stmt.lineno, name_col, stmt.lineno, name_col + len("forward")),
                params=_params(src, stmt),
                helpers=_helpers(stmt, functions, methods - {"forward"}),
            )
    return None


def _comment_lines(text: str, src: SourceText, tree: ast.Module) -> set[int]:
    """Lines that hold nothing but a comment (via tokenize, so strings are not mistaken)."""
    lines: set[int] = set()
    try:
        for tok in tokens(text, tree.body):
            if tok.type == tokenize.COMMENT and not src.line(tok.start[0])[: tok.start[1]].strip():
                lines.add(tok.start[0])
    except (tokenize.TokenError, SyntaxError, ValueError):
        lines = {i for i, line in enumerate(src.lines, 1) if line.lstrip().startswith("#")}
    return lines


def _lines_above(
    node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef, comments: set[int]
) -> list[int]:
    """The comment lines directly above a statement (decorators may sit between)."""
    above: list[int] = []
    decorator_lines: set[int] = set()
    for d in node.decorator_list:
        decorator_lines.update(range(d.lineno - 1, (d.end_lineno or d.lineno) + 1))
    line = node.lineno - 1
    while line >= 1 and (line in comments or line in decorator_lines):
        if line in comments:
            above.append(line)
        line -= 1
    above.reverse()
    return above


def _directive_lines(node: ast.ClassDef, comments: set[int], src: SourceText) -> list[int]:
    """Comment lines attached to a class: directly above (decorators may sit between) and the
    comment lines at the start of its body (before and right after a docstring)."""
    above = _lines_above(node, comments)
    inside: list[int] = []
    first = node.body[0]
    header_end = (node.bases[-1].end_lineno if node.bases else None) or node.lineno
    header_end = max(header_end, *(k.value.end_lineno or 0 for k in node.keywords), node.lineno)
    line = header_end + 1
    while line < first.lineno and line in comments:
        inside.append(line)
        line += 1
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        line = (first.end_lineno or first.lineno) + 1
        while line in comments:
            inside.append(line)
            line += 1
    return above + inside


def _fx403(span: Span, error: str) -> Diagnostic:
    return FX403(span, error=error).diagnostic()


def _read_directives(
    cls: ClassInfo, lines: list[int], src: SourceText, diagnostics: list[Diagnostic]
) -> None:
    items: list[Directive] = []
    for line in lines:
        m = DIRECTIVE_RE.match(src.line(line))
        if m is None:
            continue
        span = src.line_span(line)
        try:
            items.append(parse_directive(m.group("body"), line=line, span=span))
        except DirectiveError as exc:
            diagnostics.append(_fx403(span, str(exc)))
    forward = cls.effective_forward
    seen_inputs: dict[str, int] = {}
    init_line: int | None = None
    kept: list[Directive] = []
    for d in items:
        span = d.span or src.line_span(d.line)
        if d.kind == "pass":
            diagnostics.append(
                _fx403(
                    span,
                    "`pass` marks a function, not a class: put it directly above the `def` of "
                    "a function that takes and returns a GraphModule",
                )
            )
            continue
        if d.kind == "init":
            if init_line is not None:
                diagnostics.append(
                    _fx403(span, f"`init` is given twice (first on line {init_line})")
                )
                continue
            init_line = d.line
        if d.kind == "input" and d.input is not None:
            name = d.input.name
            if name in seen_inputs:
                diagnostics.append(
                    _fx403(
                        span,
                        f"input `{name}` is declared twice (first on line {seen_inputs[name]})",
                    )
                )
                continue
            seen_inputs[name] = d.line
            if forward is not None and not forward.accepts_any_keyword:
                names = [p.name for p in forward.params if p.kind not in ("var_positional",)]
                if name not in names:
                    shown = ", ".join(names) or "no parameters"
                    diagnostics.append(
                        _fx403(
                            span,
                            f"`{cls.name}.forward` has no parameter `{name}` (it takes {shown})",
                        )
                    )
                    continue
        kept.append(d)
    cls.directives = merge(kept)


def _inputs(cls: ClassInfo) -> list[InputSpec]:
    forward = cls.effective_forward
    specs: dict[str, InputSpec] = {}
    if forward is not None:
        for p in forward.params:
            if p.input is not None:
                specs[p.name] = p.input
    specs.update(cls.directives.inputs)
    if forward is None:
        return list(specs.values())
    order = [p.name for p in forward.params]
    return sorted(
        specs.values(), key=lambda s: order.index(s.name) if s.name in order else len(order)
    )


def parse(text: str) -> ParseResult:
    """Classes, directives and the syntax error (if any) of a document. Never raises."""
    src = SourceText(text)
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        line = exc.lineno or 1
        col = max((exc.offset or 1) - 1, 0)
        end_line = exc.end_lineno or line
        end_col = max((exc.end_offset or 0) - 1, col + 1)
        if end_line == line and end_col <= col:
            end_col = col + 1
        line_len = len(src.line(line))
        col = min(col, line_len)
        if end_line == line:
            end_col = min(max(end_col, col + 1), max(line_len, col + 1))
        return ParseResult(
            syntax_error=SyntaxErrorInfo(Span(line, col, end_line, end_col), exc.msg)
        )
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        return ParseResult(syntax_error=SyntaxErrorInfo(Span(1, 0, 1, len(src.line(1))), str(exc)))

    defs_list = list(_top_level_classes(tree.body))
    defs = {n.name: n for n in defs_list}
    kinds = _classify(defs)
    functions = _module_functions(tree)
    comments = _comment_lines(text, src, tree)
    result = ParseResult(defined=top_level_names(tree), tree=tree)
    attached: set[int] = set()
    forwards: dict[str, ForwardInfo | None] = {}
    for node in defs_list:
        forwards[node.name] = _forward(src, node, functions)
    for node in defs_list:
        candidate, certain = kinds.get(node.name, (False, False))
        lines = _directive_lines(node, comments, src)
        if not candidate:
            continue
        attached.update(lines)
        if node.decorator_list:
            first = node.decorator_list[0]
            start = first.lineno
            start_col = max(src.line(start).rfind("@", 0, src.col(start, first.col_offset)), 0)
        else:
            start, start_col = node.lineno, src.col(node.lineno, node.col_offset)
        line_text = src.line(node.lineno)
        kw = src.col(node.lineno, node.col_offset)
        name_col = line_text.find(node.name, kw + len("class"))
        if name_col < 0:
            name_col = kw
        cls = ClassInfo(
            name=node.name,
            line=node.lineno,
            name_span=Span(node.lineno, name_col, node.lineno, name_col + len(node.name)),
            span=Span(start, start_col, *_end(src, node)),
            body=src.span(
                node.body[0].lineno, node.body[0].col_offset, node.end_lineno, node.end_col_offset
            ),
            bases=[src.segment(b) or "" for b in node.bases],
            certain=certain,
            forward=forwards[node.name],
            inherited_forward=None
            if forwards[node.name] is not None
            else _inherited_forward(node, defs, forwards),
        )
        _read_directives(cls, lines, src, result.diagnostics)
        cls.inputs = _inputs(cls)
        result.classes.append(cls)
    attached.update(_passes(tree, src, comments, result))
    for line in sorted(comments - attached):
        if DIRECTIVE_RE.match(src.line(line)):
            result.diagnostics.append(
                _fx403(
                    src.line_span(line),
                    "not attached to a module class; put `# fxls:` lines directly "
                    "above a `class` statement (no blank line) or at the start of its body",
                )
            )
    result.diagnostics.sort(key=lambda d: (d.span.line, d.span.col))
    return result


def _passes(tree: ast.Module, src: SourceText, comments: set[int], result: ParseResult) -> set[int]:
    """Read the ``pass`` directives above the file's top-level functions into
    ``result.passes`` (and each class's ``passes``); returns the lines they use."""
    used: set[int] = set()
    classes = {c.name: c for c in result.classes}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        info: PassInfo | None = None
        for line in _lines_above(node, comments):
            m = DIRECTIVE_RE.match(src.line(line))
            if m is None:
                continue
            span = src.line_span(line)
            try:
                directive = parse_directive(m.group("body"), line=line, span=span)
            except DirectiveError as exc:
                if m.group("body").split(maxsplit=1)[:1] == ["pass"]:
                    used.add(line)
                    result.diagnostics.append(_fx403(span, str(exc)))
                continue  # others: reported as directives that are not attached to a class
            if directive.kind != "pass":
                continue
            used.add(line)
            if isinstance(node, ast.AsyncFunctionDef):
                result.diagnostics.append(
                    _fx403(span, f"`{node.name}` is `async`: a pass must be a plain function")
                )
                continue
            if info is None:
                text = src.line(node.lineno)
                col = text.find(node.name, src.col(node.lineno, node.col_offset) + len("def"))
                col = max(col, 0)
                name_span = Span(node.lineno, col, node.lineno, col + len(node.name))
                info = PassInfo(node.name, node.lineno, name_span)
                result.passes.append(info)
            info.directive_lines.append(line)
            for name in directive.classes:
                cls = classes.get(name)
                if cls is None:
                    result.diagnostics.append(
                        _fx403(span, f"`pass {name}`: this file has no module class `{name}`")
                    )
                elif name not in info.classes:
                    info.classes.append(name)
                    cls.passes.append(PassRequest(node.name, node.lineno))
    return used


def _end(src: SourceText, node: ast.stmt) -> tuple[int, int]:
    end = src.span(node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)
    return end.end_line, end.end_col


def _inherited_forward(
    node: ast.ClassDef, defs: dict[str, ast.ClassDef], forwards: dict[str, ForwardInfo | None]
) -> ForwardInfo | None:
    seen = {node.name}
    queue = [_base_name(b) for b in node.bases]
    while queue:
        name = queue.pop(0)
        if name is None or name in seen or name not in defs:
            continue
        seen.add(name)
        if forwards.get(name) is not None:
            return forwards[name]
        queue.extend(_base_name(b) for b in defs[name].bases)
    return None


def find_classes(text: str) -> list[ClassInfo]:
    """The nn.Module candidate classes of ``text`` ([] when it does not parse)."""
    return parse(text).classes
