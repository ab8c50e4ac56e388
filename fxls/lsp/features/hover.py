"""Hover: what a call in ``forward`` does (named arguments, shapes) and class summaries.

Pure: works on protocol objects (``ModuleResult``/``NodeInfo``) and the analysed text, in
protocol positions (1-based lines, code-point columns).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from lsprotocol import types

from fxls.analysis import ClassInfo
from fxls.engine.render import (
    Run,
    argument_texts,
    call_parts,
    compile_text,
    count_text,
    escaping,
    example_text,
    executions,
    fallback_text,
    fixed_ones,
    inner_module_calls,
    module_summary,
    name_pattern,
    ones_note,
    others_text,
    outputs_held_sizes,
    parse_expression,
    plural,
    runs_across,
    short_target,
    shows_any,
    span_text,
    truncate,
    unpacked_text,
    values_text,
)
from fxls.lsp.features import markdown as md
from fxls.lsp.features.convert import Encoding, LineMapper, lsp_range, span_contains
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import InputValue, ModuleResult, NodeInfo, Span

_CLASS_RE = re.compile(r"^(\s*class\s+)([A-Za-z_]\w*)")


@dataclass
class HoverText:
    markdown: str
    span: Span


def _size(span: Span) -> tuple[int, int]:
    return span.end_line - span.line, (span.end_col - span.col) if span.end_line == span.line else 0


def _candidate(node: NodeInfo, line: int, col: int) -> Span | None:
    best: Span | None = None
    for span in (node.span, node.call_site):
        contains = span is not None and span_contains(span, line, col)
        if contains and (best is None or _size(span) < _size(best)):  # type: ignore[arg-type]
            best = span
    return best


Style = Literal["table", "block"]
"""How a hover is laid out: ``table`` (Markdown tables: VS Code and most clients) or
``block`` (one fenced code block with aligned columns: Neovim, whose float shows tables raw
and hides ``_`` inside words)."""

MAX_ROWS = 8
"""Most argument or layer rows of a call hover before a "… N more" line (the whole hover
stays within about 12 lines)."""
MAX_NOTES = 6
"""Notes a class hover shows; it says how many more there are."""
_PLUMBING_METHODS = {
    "size", "dim", "contiguous", "view", "reshape", "transpose", "permute", "split", "chunk",
    "unsqueeze", "squeeze", "flatten", "expand", "to", "type", "float", "type_as", "numel",
}  # fmt: skip
_PLUMBING_FUNCTIONS = {"getattr", "getitem", "size", "contiguous", "view", "reshape"}


def style_for_client(name: str | None) -> Style:
    """The hover style for a client, by ``clientInfo.name`` (Neovim: ``block``)."""
    lowered = (name or "").lower()
    return "block" if "neovim" in lowered or lowered in ("nvim", "vim") else "table"


@dataclass
class CallView:
    """What a call hover says, as plain text; :func:`render_view` escapes it per style."""

    output: str
    callee: str
    summary: str | None = None
    repeat: str | None = None
    columns: tuple[str, str, str] = ("argument", "expression", "shape")
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _outputs_text(node: NodeInfo) -> str:
    return values_text(node.outputs) or "?"


NO_RESULT = "? (the call returns nothing it computes)"
"""The output of a call none of whose values is used after it: it returns a value made
before it (``if n_rep == 1: return x``) or one that is no node (a Python number)."""


def result_text(nodes: Sequence[NodeInfo]) -> str:
    """What one run of a call returns: the values it made that are used after it."""
    out = escaping(nodes)
    if not out:
        return NO_RESULT
    if len(out) == 1:
        return _outputs_text(out[0])
    return "(" + ", ".join(_outputs_text(n) for n in out) + ")"


def _arg_rows(
    node: NodeInfo, module: ModuleResult, lines: Sequence[str], call_text: str | None
) -> list[tuple[str, str, str]]:
    by_name = {n.name: n for n in module.nodes}
    written: dict[str, str] = {}
    if node.op != "call_module" or node.name not in inner_module_calls(module.nodes):
        written = argument_texts(node, call_parts(call_text))
    explicit: list[tuple[str, str, str]] = []
    defaults: list[tuple[str, str, str]] = []
    for arg in node.args:
        prefix = {"var_positional": "*", "var_keyword": "**"}.get(arg.kind, "")
        if arg.default:
            defaults.append((prefix + arg.name, arg.value, "default"))
            continue
        expr = written.get(arg.name) or fallback_text(
            arg, by_name, lines, node.span or node.call_site
        )
        source = by_name.get(arg.node) if arg.node else None
        shape = values_text(source.outputs) if source is not None else ""
        explicit.append((prefix + arg.name, expr, shape))
    return explicit + defaults


def _callee(node: NodeInfo) -> tuple[str, str | None]:
    if node.op == "call_module":
        return node.target, module_summary(node.module_type) if node.module_type else None
    if node.op == "call_method":
        return f"Tensor.{node.target}", None
    return node.target, None  # the worker names the document's own functions bare


def node_view(
    node: NodeInfo, module: ModuleResult, lines: Sequence[str], call: Span | None = None
) -> CallView:
    """One call node: output, callee, arguments as written."""
    callee, summary = _callee(node)
    text = span_text(lines, call or node.span)
    view = CallView(_outputs_text(node), callee, summary)
    if node.op in ("placeholder", "output"):
        # the parameter as written (FX renames `hidden` to `hidden_1` when it is fixed)
        written = (text or "").split(":", 1)[0].split("=", 1)[0].strip().lstrip("*")
        name = written if written.isidentifier() else node.target
        view.callee = f"input {name}" if node.op == "placeholder" else "return"
        return view
    view.rows = _arg_rows(node, module, lines, text)
    if node.signature == "approximate":
        view.notes.append("argument names are approximate")
    return view


def iteration_prefix(path: str) -> str | None:
    """``h.3`` for ``h.3.attn.proj``: the path up to its first all-digit part (not the
    first part), or None. One pass over the dotted parts."""
    parts = path.split(".")
    for index in range(1, len(parts)):
        if parts[index].isdecimal():
            return ".".join(parts[: index + 1])
    return None


def _path(node: NodeInfo) -> str:
    """The module instance a node runs in, a call_module node's own submodule included."""
    return node.target if node.op == "call_module" else (node.module_path or "")


def _shape_key(node: NodeInfo) -> tuple[str, str, str]:
    """What must agree between two iterations of a real loop: op, target with indices
    hidden, and the submodule's constructor."""
    return (*name_pattern(node), node.module_type or "")


def repetitions(nodes: Sequence[NodeInfo]) -> list[list[NodeInfo]] | None:
    """The iterations of a real loop (``for block in self.h``: ``h.0``, ``h.1`` ... doing
    the same thing), or None. A Sequential called once whose layers differ is no loop."""
    if len(nodes) > 1 and len({_shape_key(n) for n in nodes}) == 1:
        return [[n] for n in nodes]
    groups: dict[str, list[NodeInfo]] = {}
    for node in nodes:
        prefix = iteration_prefix(_path(node))
        if prefix is None:
            return None
        groups.setdefault(prefix, []).append(node)
    if len(groups) < 2:
        return None
    keys = {tuple(_shape_key(n) for n in group) for group in groups.values()}
    return list(groups.values()) if len(keys) == 1 else None


def _common_path(nodes: Sequence[NodeInfo]) -> str:
    paths = [_path(n).split(".") for n in nodes if _path(n)]
    if not paths or len(paths) < len(nodes):
        return ""
    common: list[str] = []
    for parts in zip(*paths):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return ".".join(common)


def _is_plumbing(node: NodeInfo) -> bool:
    if node.op in ("get_attr", "placeholder", "output"):
        return True
    short = node.target.rsplit(".", 1)[-1]
    if node.op == "call_method":
        return short in _PLUMBING_METHODS
    return node.op == "call_function" and short in _PLUMBING_FUNCTIONS


def _is_tensor(node: NodeInfo) -> bool:
    return any(v.kind == "tensor" for v in node.outputs)


def _layer_name(node: NodeInfo, base: str) -> str:
    if node.op == "call_module":
        path = node.target
        return path[len(base) + 1 :] if base and path.startswith(base + ".") else path
    return short_target(node)


def _entering(listed: Sequence[NodeInfo], inside: set[str], module: ModuleResult) -> list[NodeInfo]:
    """The tensors that enter a group of nodes from outside it, in the order it reads them."""
    by_name = {n.name: n for n in module.nodes}
    entering: list[NodeInfo] = []
    for node in listed:
        for name in node.inputs:
            source = by_name.get(name)
            if name in inside or source is None or source.op == "get_attr" or source in entering:
                continue
            if any(v.kind == "tensor" for v in source.outputs):
                entering.append(source)
    return entering


def _paired(
    written: Sequence[tuple[str, str]], entering: Sequence[NodeInfo], lines: Sequence[str]
) -> list[tuple[str, str]]:
    """Each argument of a call (its label and expression) with the shape of the value it
    passes: the entering value that is a parameter of that name or a node written as that
    expression, else the entering values left over in the order they are read (a block reads
    ``temb`` before ``hidden_states`` when its first layer is a norm conditioned on ``temb``).
    A constant (``mask=None``) passes no value, nor does an expression made from a value it
    names (``device=idx.device`` reads ``idx`` but does not pass it)."""
    spelled = {_spelling(n, lines): n for n in reversed(entering)}
    matched = {i: spelled.get(" ".join(e.split())) for i, (_, e) in enumerate(written)}
    reads = [_names_in(e) for _, e in written]
    read = set().union(*reads)
    left = [n for n in entering if n not in matched.values() and _spelling(n, lines) not in read]
    out = []
    for index, (label, expr) in enumerate(written):
        if expr.startswith("*"):  # ``*args``: the values it carries, each by its name
            out += [
                (truncate(_spelling(n, lines) or n.name, 60), values_text(n.outputs)) for n in left
            ]
            left = []
            continue
        takes = left and not _constant(expr) and not reads[index] & spelled.keys()
        source = matched[index] or (left.pop(0) if takes else None)
        out.append((label, values_text(source.outputs) if source is not None else ""))
    return out


def _names_in(expr: str) -> set[str]:
    """The plain names an expression reads, when it is more than one name (``idx.device``
    reads ``idx``); none for a single name or what does not parse."""
    tree = parse_expression(expr) if len(expr) <= 200 else None
    if tree is None or isinstance(tree.body, ast.Name):
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _constant(expr: str) -> bool:
    """``None``, ``True``, ``0.5``, ``"mean"``, ``(1, 2)``: an argument that carries no tensor."""
    try:
        ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _spelling(node: NodeInfo, lines: Sequence[str]) -> str:
    """How the code names a value entering a call: a parameter by its name, a node by its
    source text (whitespace folded); "" when it has none."""
    text = node.target if node.op == "placeholder" else span_text(lines, node.span) or ""
    return " ".join(text.split())


def group_view(
    nodes: Sequence[NodeInfo], module: ModuleResult, lines: Sequence[str], call: Span
) -> CallView:
    """A call whose nodes are in a submodule or helper: one call, input → output, its layers
    (plumbing left out) with their output shapes; ×N with first and last shapes for a loop."""
    loops = repetitions(nodes)
    listed = loops[0] if loops else list(nodes)
    text = span_text(lines, call)
    parts = call_parts(text)
    callee = (parts.func if parts and parts.func else None) or (text or "").split("(", 1)[0]
    base = _common_path(listed)
    if loops:
        base = iteration_prefix(_path(listed[0])) or base
    view = CallView(result_text(nodes), " ".join(callee.split()) or "call")
    if loops:
        last = loops[-1]
        end = iteration_prefix(_path(last[0])) or _common_path(last)
        view.repeat = f"×{len(loops)}: {base} … {end}"
    elif base and base != view.callee.removeprefix("self."):
        view.summary = base
    written = [(e, e) for e in parts.positional] if parts else []
    written += [(f"{k}={e}", e) for k, e in parts.keywords.items()] if parts else []
    # (a parameter placed at the call, as a pass-through wrapper's are, still enters it)
    entering = _entering(listed, {n.name for n in nodes if n.op != "placeholder"}, module)
    rows = [("input", expr, shape) for expr, shape in _paired(written, entering, lines)]
    layers = [n for n in listed if n.op == "call_module"]
    if not layers:
        layers = [n for n in listed if not _is_plumbing(n) and _is_tensor(n)]
    children: list[tuple[str, list[NodeInfo]]] = []
    for node in layers:
        name = _layer_name(node, base)
        child = name.split(".", 1)[0] if node.op == "call_module" else name
        if children and children[-1][0] == child and node.op == "call_module":
            children[-1][1].append(node)
        else:
            children.append((child, [node]))
    last_in: dict[str, NodeInfo] = {}
    for node in listed:
        path = _path(node)
        rel = path[len(base) + 1 :] if base and path.startswith(base + ".") else path
        if rel and _is_tensor(node):
            last_in[rel.split(".", 1)[0]] = node
    for child, members in children:
        # the child's output is the last tensor made inside it, not its last layer's: a
        # patch embedding's projection gives [B, 768, 14, 14], the embedding [B, 196, 768]
        node = last_in.get(child, members[-1])
        if len(members) == 1 and _layer_name(node, base) == child:
            what = module_summary(node.module_type) if node.module_type else ""
        else:
            what = plural(len(members), "layer")
        rows.append((child, what, _outputs_text(node)))
    view.columns = ("", "", "shape")
    view.rows = rows
    return view


def _clip_rows(rows: Sequence[tuple[str, str, str]]) -> tuple[list[tuple[str, str, str]], int]:
    if len(rows) <= MAX_ROWS + 1:
        return list(rows), 0
    return list(rows[:MAX_ROWS]), len(rows) - MAX_ROWS


def _md_shape(text: str) -> str:
    if not text:
        return ""
    if text == "default":
        return "*default*"
    return md.code(text, md.MAX_CELL, cell=True)


def render_view(view: CallView, style: Style = "table") -> str:
    """A CallView as hover Markdown: a table (``table``) or one aligned code block
    (``block``). Every string passes through :mod:`fxls.lsp.features.markdown`."""
    rows, more = _clip_rows(view.rows)
    keep = [i for i in range(3) if i == 0 or any(row[i] for row in rows)]
    columns = [view.columns[i] for i in keep]
    callee = view.callee + (f" · {view.summary}" if view.summary else "")
    if style == "block":
        lines = [f"→ {view.output}", callee]
        if view.repeat:
            lines.append(view.repeat)
        widths = [min(max((len(r[i]) for r in rows), default=0), 28) for i in range(3)]
        for row in rows:
            cells = [
                ("(default)" if row[i] == "default" else row[i]).ljust(widths[i]) for i in keep
            ]
            lines.append(("  " + "  ".join(cells)).rstrip())
        if more:
            lines.append(f"  … {more} more")
        lines.extend(view.notes)
        return md.code_block(lines)
    parts = [f"→ {md.code(view.output)}"]
    head = md.word(view.callee)
    if view.summary:
        head += f" · {md.code(view.summary)}"
    parts.append(head)
    if view.repeat:
        parts.append(md.code(view.repeat))
    if rows:
        table = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(keep)]
        for name, expr, shape in rows:
            cells = [md.cell(name) if name else "", md.code(expr, md.MAX_CELL, cell=True)]
            cells.append(_md_shape(shape))
            table.append("| " + " | ".join(cells[i] for i in keep) + " |")
        if more:
            table.append(f"| … {more} more |" + " |" * (len(keep) - 1))
        parts.append("\n".join(table))
    parts.extend(f"*{md.text(note, md.MAX_VALUE)}*" for note in view.notes)
    return _paragraphs(parts)


def _paragraphs(parts: Sequence[str]) -> str:
    return md.join_blocks(parts, "\n\n", md.MAX_MARKDOWN)


def _table(header: str, rows: Sequence[str], more: str, max_rows: int = md.MAX_ROWS) -> str:
    """A Markdown table of at most ``max_rows`` rows and MAX_MARKDOWN / 2 characters."""
    body = md.join_blocks(rows, "\n", md.MAX_MARKDOWN // 2, more, max_count=max_rows)
    return header + ("\n" + body if body else "")


def class_name_span(module: ModuleResult, lines: Sequence[str]) -> Span | None:
    """The span of the class name on its ``class`` line."""
    if not 1 <= module.line <= len(lines):
        return None
    match = _CLASS_RE.match(lines[module.line - 1])
    if match is None or match.group(2) != module.name:
        return None
    return Span(module.line, match.start(2), module.line, match.end(2))


def construction_text(module: ModuleResult) -> list[str]:
    """How the instance was built, in words: ``built by `GPT.forward` as `transformer.h.0```,
    ``assumed: dim=64, heads=4 — pin with `# fxls: init(dim=64, heads=4)```."""
    built = module.constructed
    if built is None:
        return []
    how = {
        "directive": "built from the directive",
        "defaults": "built with its defaults",
        "config": "built from a config",
        "factory": "built by a factory",
        "call site": "built as the file calls it",
        "assumed": "built with assumed arguments",
    }.get(built.source, f"built from {built.source}")
    if built.source == "parent" and built.inputs_from:
        lines = [f"built by {built.inputs_from}.forward as {built.text}"]
    elif built.source == "parent":  # its parent built it; the parent's forward did not run
        lines = [f"built by {built.text.split('.', 1)[0]}.__init__ as {built.text}"]
    else:
        lines = [f"{how}: {built.text}"]
    parent = built.expr.split(".get_submodule(", 1)[0] if built.expr else ""
    if built.source == "parent" and parent and parent != built.expr:
        # the parent's own build names the configuration (LlamaForCausalLM(LlamaConfig(...)))
        lines.append(f"parent built as {truncate(parent, 120)}")
    if built.assumed:
        assumed = ", ".join(f"{k}={v}" for k, v in built.assumed.items())
        pin = f" — pin with # fxls: init({built.pin})" if built.pin else ""
        lines.append(f"assumed: {assumed}{pin}")
    return lines


@dataclass
class ClassSummary:
    """What a class hover (and the trace command) says, as plain text."""

    name: str
    status: str
    """``traced (fx)``, ``partial (fake-run)``, ``failed``..."""
    rows: list[tuple[str, str]]
    error: tuple[str, str] | None = None

    @property
    def title(self) -> str:
        return f"{self.name} · nn.Module · {self.status}"

    def lines(self) -> list[str]:
        """The summary as aligned plain-text lines (title, rows, error)."""
        width = max((len(label) for label, _ in self.rows), default=0)
        out = [self.title, *(f"{label.ljust(width)}  {value}" for label, value in self.rows)]
        if self.error is not None:
            out.append(f"failed in {self.error[0]}: {self.error[1]}")
        return out


_ORIGINS = {
    "declared": "declared",
    "parent": "from the parent's call",
    "default": "the default",
    "assumed": "assumed",
}


_FROM_CALL = re.compile(r"\(from the call at line (\d{1,7})\)$")


def input_origin(module: ModuleResult, given: InputValue) -> str:
    """How the capture got ``forward``'s input ``given``, in words: an input taken from a
    call in the file names the call's line (``assumed from the call at line 14``)."""
    origin = given.origin
    if origin == "assumed":
        for diagnostic in module.diagnostics:
            if diagnostic.code != "FX405" or diagnostic.data.get("arg") != given.name:
                continue
            found = _FROM_CALL.search(diagnostic.message)
            if found is not None:
                return f"assumed from the call at line {int(found.group(1))}"
    return _ORIGINS.get(origin, origin)


MAX_BREAK_ROWS = 10
"""Graph breaks a class hover lists (the diagnostics have them all)."""


def compile_rows(module: ModuleResult) -> list[tuple[str, str]]:
    """The compile check in rows: what it found, then each break (line, function, code,
    torch's reason) and why it stopped or did not run."""
    check = module.compile
    if check is None:
        return []
    found = compile_text(check)
    rows = [("torch.compile", found if found is not None else f"not checked: {check.message}")]
    for brk in check.breaks[:MAX_BREAK_ROWS]:
        where = f"line {brk.span.line}" + (f" in {brk.function}" if brk.function else "")
        rows.append(("graph break", f"{where}: {brk.code} {brk.reason}"))
    if len(check.breaks) > MAX_BREAK_ROWS:
        rows.append(("graph break", f"… {len(check.breaks) - MAX_BREAK_ROWS} more"))
    if check.status == "stopped":
        rows.append(("compile check", check.message))
    elif check.status == "limit":
        why = f"the file's compile job stopped at its {check.message} before this class's end"
        rows.append(("compile check", why))
    return rows


def _parameter_rows(module: ModuleResult) -> list[tuple[str, str]]:
    """The parameters as built; first those of the default configuration when the build has
    fewer layers than it."""
    rows = []
    if module.default_params is not None:
        rows.append(("parameters", f"{count_text(module.default_params)} "
                     f"({module.default_params:,}) in the default configuration"))  # fmt: skip
    if module.params is not None:
        exact = f" ({module.params:,})" if module.params >= 1_000 else ""
        built = " as built, with fewer layers" if module.default_params is not None else ""
        rows.append(("parameters", f"{count_text(module.params)}{exact}{built}"))
    return rows


def _notes_shown(notes: Sequence[str]) -> list[str]:
    """The first :data:`MAX_NOTES` notes, and how many more there are."""
    shown = list(notes[:MAX_NOTES])
    if len(notes) > MAX_NOTES:
        left = len(notes) - MAX_NOTES
        shown.append(f"{plural(left, 'more note')} (`fxls check --json` lists them)")
    return shown


def _output_row(module: ModuleResult, ones: dict[str, int]) -> str:
    """``[4, 8] float32 (holds for B = 2 only)`` (the outputs differ at other sizes), or
    ``[1, 10] float32 (holds for B = 1)`` (a name given as 1 may be in them)."""
    sizes = outputs_held_sizes(module)
    output = values_text(module.outputs)
    if sizes is None:
        return output
    only = "" if ones and sizes == ones else " only"
    return f"{output} ({example_text(sizes)}{only})"


def class_summary(
    module: ModuleResult, *, isolation: Sequence[str] = (), duration_s: float | None = None
) -> ClassSummary:
    """A module class in rows: parameters, nodes, inputs, output, how it was built and
    captured, notes, isolation, time; the error when it failed."""
    status: str = module.status
    if module.strategy.method != "none":
        status = f"{status} ({strategy_label(module.strategy)})"
    rows: list[tuple[str, str]] = _parameter_rows(module)
    if module.buffers is not None:
        rows.append(("buffers", f"{module.buffers:,}"))
    if module.nodes:
        kinds: dict[str, int] = {}
        for node in module.nodes:
            kinds[node.op] = kinds.get(node.op, 0) + 1
        by_kind = " · ".join(f"{n} {op}" for op, n in list(kinds.items())[:10])
        rows.append(("nodes", f"{plural(len(module.nodes), 'node')}: {by_kind}"))
    for given in module.inputs:
        shown = f"{values_text([given.value])} ({input_origin(module, given)})"
        rows.append((f"input {given.name}", shown))
    ones = fixed_ones(module)
    if module.outputs:
        rows.append(("output", _output_row(module, ones)))
    for line in construction_text(module):
        rows.append(("built", line))
    capture = strategy_label(module.strategy)
    if module.build:
        capture += f", built on {module.build}"
    rows.append(("capture", capture))
    notes = [ones_note(ones)] if ones and shows_any(module.outputs, ones.values()) else []
    rows.extend(("note", note) for note in _notes_shown(notes + module.notes))
    rows.extend(compile_rows(module))
    if isolation:
        rows.append(("isolation", ", ".join(isolation)))
    seconds = sum(module.timings.values()) if module.timings else duration_s
    if seconds is not None:
        rows.append(("capture time", f"{seconds:.2f} s"))
    error = None
    if module.error is not None:
        err = module.error
        error = (err.phase, md.clip(f"{err.type}: {err.message}", md.MAX_VALUE // 4))
    return ClassSummary(module.name, status, rows, error)


def class_markdown(
    module: ModuleResult,
    *,
    isolation: Sequence[str] = (),
    duration_s: float | None = None,
    style: Style = "table",
) -> str:
    """Markdown summary of a module class (a table, or one code block for ``block``)."""
    summary = class_summary(module, isolation=isolation, duration_s=duration_s)
    if style == "block":
        return md.code_block(summary.lines())
    cells = [
        f"| {md.text(label, cell=True)} | {md.text(value, cell=True)} |"
        for label, value in summary.rows
    ]
    parts = [
        f"{md.word(module.name)} · nn.Module · {md.text(summary.status)}",
        _table("| | |\n| --- | --- |", cells, "| … {n} more | |"),
    ]
    if summary.error is not None:
        phase, message = summary.error
        parts.append(f"failed in {md.word(phase)}: {md.code(message)}")
    return _paragraphs(parts)


def hover_text(
    modules: Sequence[ModuleResult],
    lines: Sequence[str],
    line: int,
    col: int,
    *,
    isolation: Sequence[str] = (),
    duration_s: float | None = None,
    style: Style = "table",
) -> HoverText | None:
    """The hover at a position of the analysed text, or None."""
    for module in modules:
        name_span = class_name_span(module, lines)
        if name_span is not None and span_contains(name_span, line, col):
            text = class_markdown(module, isolation=isolation, duration_s=duration_s, style=style)
            return HoverText(text, name_span)
    best: tuple[tuple[int, int], Span, ModuleResult] | None = None
    for module in modules:
        for node in module.nodes:
            span = _candidate(node, line, col)
            if span is not None and (best is None or _size(span) < best[0]):
                best = (_size(span), span, module)
    if best is None:
        return None
    _, span, first = best
    per_module = []
    for module in [first, *(m for m in modules if m is not first)]:
        group = [n for n in module.nodes if _candidate(n, line, col) == span]
        if group:
            runs = executions(group, module.containers, lambda n: n.span == span, module)
            per_module.append((module, runs))
    runs = runs_across(per_module)
    return HoverText(render_view(runs_view(runs, lines, span), style), span)


def unpacking_view(
    group: Sequence[NodeInfo], module: ModuleResult, lines: Sequence[str], span: Span
) -> CallView | None:
    """``B, T, C = x.size()`` / ``q, k, v = ....split(...)``: one row per assigned name, or
    None when the span is not such a target. The size a shape unpacking reads
    (``getattr(x, "shape")``, made where it is used) is not one of the names."""
    items = [n for n in group if n.target.rsplit(".", 1)[-1] == "getitem"]
    rest = [n for n in group if n.target.rsplit(".", 1)[-1] != "getitem"]
    if any(any(v.kind != "size" for v in n.outputs) for n in rest):
        return None
    group = items
    text = span_text(lines, span)
    parsed = parse_expression(text or "")
    if parsed is None:
        return None
    target = parsed.body
    if not isinstance(target, ast.Tuple) or len(target.elts) != len(group):
        return None
    names = [ast.get_source_segment(text or "", e) or "?" for e in target.elts]
    values = [values_text(n.outputs) or "?" for n in group]
    by_name = {n.name: n for n in module.nodes}
    first = group[0].args[0] if group[0].args else None
    source = by_name.get(first.node) if first is not None and first.node else None
    whole = fallback_text(first, by_name, lines) if first is not None else "…"
    output = unpacked_text(
        names, [n.outputs[0] if len(n.outputs) == 1 else n.outputs for n in group]
    )
    # a size made where it is unpacked (``x.shape`` read lazily) has the target's own text
    callee = "unpacking" if source is not None and source.span == span else f"unpacking {whole}"
    if source is not None and source.outputs:
        callee += f" · {values_text(source.outputs)}"
    view = CallView(output, callee, columns=("name", "", "value"))
    view.rows = [(n, "", v) for n, v in zip(names, values)]
    return view


def call_view(
    group: Sequence[NodeInfo], module: ModuleResult, lines: Sequence[str], span: Span
) -> CallView:
    """The view of the nodes of one class that one hovered span produced (:func:`runs_view`)."""
    runs = executions(group, module.containers, lambda n: n.span == span, module)
    return runs_view(runs, lines, span)


def runs_view(runs: Sequence[Run], lines: Sequence[str], span: Span) -> CallView:
    """The view of one run of the code at ``span`` (the first), naming it and counting the
    other runs whose view differs, when it ran several times (the blocks of a loop, the calls
    of a helper, in one captured class or several). A view never mixes two runs' values."""
    first = runs[0]
    module = first.module
    assert module is not None
    view = _run_view(first.nodes, module, lines, span)
    if len(runs) > 1:
        shown = _shown(view)
        differ = 0
        for run in runs[1:]:
            assert run.module is not None
            differ += _shown(_run_view(run.nodes, run.module, lines, span)) != shown
        if differ:
            view.repeat = others_text(first, differ, len(runs))
        elif any(r.module is not module for r in runs):
            pass  # other classes' runs of this code show the same: nothing to add
        elif first.kind == "instances":
            view.repeat = f"×{len(runs)}: {first.label} … {runs[-1].label}"
        else:
            view.repeat = f"×{len(runs)} {first.kind}"
        if view.repeat and view.summary in (first.where, first.label):
            view.summary = None  # the instance is named on the line below
    _mark_examples(view, first.nodes, module)
    return view


def _shown(view: CallView) -> tuple[str, tuple[str, ...]]:
    """The values a view shows (its output and its rows' shapes): what must agree for two
    runs to show the same."""
    return view.output, tuple(row[2] for row in view.rows)


def _mark_examples(view: CallView, nodes: Sequence[NodeInfo], module: ModuleResult) -> None:
    """Values that hold for the example sizes only say so (``holds for B = 2``), and values
    that show a number a name of size 0 or 1 may stand for say that (``fixed_ones``)."""
    ones = fixed_ones(module)
    if ones and any(shows_any(n.outputs, ones.values()) for n in nodes):
        view.notes.insert(0, ones_note(ones, short=True))
    if not module.example_nodes:
        return
    bound = set(module.example_nodes)
    shown = nodes if len(nodes) == 1 else escaping(nodes)
    held = example_text(module.example_sizes)
    if any(n.name in bound for n in shown):
        view.notes.insert(0, f"output {held} only")
    elif any(n.name in bound or bound.intersection(n.inputs) for n in nodes):
        view.notes.insert(0, f"some values shown {held.replace('holds', 'hold', 1)} only")


def _run_view(
    nodes: Sequence[NodeInfo], module: ModuleResult, lines: Sequence[str], span: Span
) -> CallView:
    """The view of one run of the code at ``span``. A parameter read that took its user's
    span (an attribute node made lazily, when the call used it) is that call's argument, not
    a step of its own: the call's view shows it as such, as where the read has its own span."""
    reads = [n for n in nodes if n.op == "get_attr" and any(n.name in m.inputs for m in nodes)]
    nodes = [n for n in nodes if n not in reads] or nodes
    if len(nodes) == 1 and nodes[0].span in (span, None):
        return node_view(nodes[0], module, lines, span)
    if len(nodes) == 1:  # the one node of a helper, hovered where forward calls it
        return group_view(nodes, module, lines, span)
    unpacked = unpacking_view(nodes, module, lines, span)
    if unpacked is not None:
        return unpacked
    return group_view(nodes, module, lines, span)


def pending_hover(
    classes: Sequence[ClassInfo], line: int, *, worker_ready: bool, waited_s: float
) -> str | None:
    """What a hover inside a module class says before the file's first capture is done (an
    editor shows "No information available" for nothing): what fxls is doing and that shapes
    follow. None outside every class (``line`` is 1-based)."""
    inside = next((c for c in classes if c.span.line <= line <= c.span.end_line), None)
    if inside is None:
        return None
    doing = "capturing this file" if worker_ready else "starting its worker (importing torch)"
    return (
        f"fxls · {doing} ({waited_s:.0f} s so far): the shapes of {md.code(inside.name)} "
        "appear here when it is done."
    )


def lsp_hover(
    text: HoverText | None,
    current_lines: Sequence[str],
    encoding: Encoding,
    mapper: LineMapper,
    *,
    note: str | None = None,
) -> types.Hover | None:
    """HoverText -> an LSP Hover on the current text (None if its lines were edited)."""
    if text is None:
        return None
    rng = lsp_range(text.span, current_lines, encoding, mapper)
    if rng is None:
        return None
    value = text.markdown if note is None else f"{text.markdown}\n\n*{md.plain(note)}*"
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=value), range=rng
    )
