"""Text for people: shapes, values, counts and call names, the same in every view.

The CLI report, hovers, inlay hints and code lenses all word things through these functions,
so a shape or a parameter count reads the same in a terminal and in an editor. Plain text
only: Markdown escaping belongs to ``fxls.lsp.features``.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from fxls.protocol.model import (
    Arg,
    CompileCheck,
    Dim,
    ModuleResult,
    NodeInfo,
    PassResult,
    Span,
    Value,
)


def dtype_name(dtype: str | None) -> str:
    """``torch.float32`` -> ``float32``."""
    if not dtype:
        return ""
    return dtype.removeprefix("torch.")


def shape_text(shape: Sequence[Dim]) -> str:
    """``[B, 64, 112, 112]``."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def value_text(value: Value, *, dtype: bool = True, default_dtype: str | None = None) -> str:
    """A Value as shown to the user: ``[B, 64, 112, 112] float32``, ``3``, ``None``.

    With ``default_dtype`` set, that dtype is left out (inlay hints omit ``float32``).
    """
    if value.kind == "tensor":
        text = shape_text(value.shape) if value.shape is not None else "tensor"
        name = dtype_name(value.dtype)
        if dtype and name and name != default_dtype:
            text = f"{text} {name}"
        return text
    if value.kind == "none":
        return "None"
    if value.text is not None and value.kind == "other" and value.text.startswith("tensor("):
        return _tensor_repr_shape(value.text)
    if value.text is not None:
        return value.text
    return value.kind


_SIZE = re.compile(r"size=\(([^()]*)\)")


def _tensor_repr_shape(text: str) -> str:
    """``tensor(..., device='meta', size=(2, 2, 16))`` -> ``[2, 2, 16]`` (never the repr)."""
    found = _SIZE.search(text)
    if found is None:
        return "tensor"
    return "[" + ", ".join(p.strip() for p in found.group(1).split(",") if p.strip()) + "]"


def unpacked_text(
    names: Sequence[str],
    values: Sequence[Value | Sequence[Value]],
    *,
    default_dtype: str | None = None,
) -> str:
    """One part per assigned name of an unpacking line: ``B=B, T=T, C=768`` for sizes,
    ``q: [B, nh, T, hs], k: ...`` for tensors, ``hidden: ([2, B, 32], [2, B, 32])`` for a
    tuple (hovers and inlay hints say it alike)."""
    parts = []
    for name, value in zip(names, values):
        if isinstance(value, Value):
            text = value_text(value, default_dtype=default_dtype)
            parts.append(f"{name}: {text}" if value.kind == "tensor" else f"{name}={text}")
        else:
            parts.append(f"{name}: {values_text(value, default_dtype=default_dtype)}")
    return ", ".join(parts)


def values_text(
    values: Sequence[Value], *, dtype: bool = True, default_dtype: str | None = None
) -> str:
    """One output as its value, several (a flattened tuple) in parentheses."""
    if not values:
        return ""
    if len(values) == 1:
        return value_text(values[0], dtype=dtype, default_dtype=default_dtype)
    inner = ", ".join(value_text(v, dtype=dtype, default_dtype=default_dtype) for v in values)
    return f"({inner})"


def count_text(n: int) -> str:
    """Counts: ``950``, ``12.3 k``, ``25.6 M``, ``1.5 B``."""
    for size, suffix in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f} {suffix}"
    return str(n)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 node``, ``3 nodes``."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def params_text(n: int | None) -> str | None:
    """``25.6 M params`` (None when unknown)."""
    if n is None:
        return None
    return f"{count_text(n)} params" if n >= 1_000 else plural(n, "param")


def truncate(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one an ellipsis when cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def short_target(node: NodeInfo) -> str:
    """What a call node calls, briefly: ``Conv2d``, ``.view``, ``relu``."""
    if node.op == "call_module":
        if node.module_type:
            return node.module_type.split("(", 1)[0]
        return node.target
    if node.op == "call_method":
        return "." + node.target
    return node.target.rsplit(".", 1)[-1]


def display_name(node: NodeInfo) -> str:
    """The node as the user knows it: a submodule's qualified name, else the node's name."""
    return node.target if node.op == "call_module" else node.name


def _span_key(span: Span | None) -> tuple[int, int, int, int] | None:
    return None if span is None else (span.line, span.col, span.end_line, span.end_col)


def inner_module_calls(nodes: Sequence[NodeInfo]) -> set[str]:
    """Names of the ``call_module`` nodes whose span is a call of a module enclosing them, not
    their own call: ``hidden_states = resnet(hidden_states, temb)`` where ``resnet`` is a block
    of another file traced through, whose ``norm1.linear`` reads ``temb``. A layer's own call
    makes no other node at its span but what reads its output, and runs of the same code
    (a loop's blocks: ``blocks.1`` reads ``blocks.0``); so a layer is inside an enclosing call
    when its span holds a function or method node that does not read the layer's output
    (``norm1``'s ``group_norm`` beside ``norm1.linear``), or when it reads a node of its span
    that is not an earlier run of itself (``conv1`` reads ``nonlinearity``)."""
    at: dict[tuple[int, int, int, int], list[NodeInfo]] = {}
    for node in nodes:
        key = _span_key(node.span or node.call_site)
        computes = node.op.startswith("call_") and not node.target.endswith("getattr")
        if key is not None and computes:
            at.setdefault(key, []).append(node)
    inner: set[str] = set()
    for group in at.values():
        if len(group) > 1:
            inner.update(n.name for n in group if n.op == "call_module" and _enclosed(n, group))
    return inner


def _repeat_key(node: NodeInfo) -> tuple[str, str]:
    """Under which nodes of the runs of one code agree: ``blocks.0`` and ``blocks.1``."""
    return node.op, _INDEX.sub("#", node.target)


def _enclosed(layer: NodeInfo, group: Sequence[NodeInfo]) -> bool:
    """Whether the call written at ``layer``'s span (shared by ``group``, in graph order) is a
    call of a module holding ``layer``."""
    names = {n.name: n for n in group}
    if any(i in names and _repeat_key(names[i]) != _repeat_key(layer) for i in layer.inputs):
        return True
    downstream = {layer.name}
    for node in group:  # a node reads only nodes before it
        if any(i in downstream for i in node.inputs):
            downstream.add(node.name)
        elif node.op != "call_module":
            return True
    return False


def call_text(
    node: NodeInfo,
    lines: Sequence[str] | None = None,
    by_name: Mapping[str, NodeInfo] | None = None,
    inner: Collection[str] = (),
) -> str:
    """``Conv2d(input=x)``: the target with the arguments the call passed explicitly. With the
    analysed document's ``lines`` (and the module's nodes ``by_name``), each argument is the
    expression the user wrote (``add(a=out, b=identity)``, ``.relu(self=self.fc1(x))``), never
    an FX node name; without them, the recorded values. A node of ``inner``
    (:func:`inner_module_calls`) takes no text from the call written at its span."""
    written: dict[str, str] = {}
    if lines is not None and node.name not in inner:
        written = argument_texts(node, call_parts(span_text(lines, node.span)))
    parts = []
    for arg in node.args:
        if arg.default:
            continue
        value = written.get(arg.name)
        if value is None and lines is not None:
            value = fallback_text(arg, by_name or {}, lines, node.span or node.call_site)
        parts.append(f"{arg.name}={truncate(value if value is not None else arg.value, 30)}")
    return truncate(f"{short_target(node)}({', '.join(parts)})", 70)


_INDEX = re.compile(r"(?<![A-Za-z_])\d+")


def name_pattern(node: NodeInfo) -> tuple[str, str]:
    """Key under which nodes of loop iterations agree: ``h.0.attn`` and ``h.7.attn`` match."""
    target = node.module_path or node.target
    return node.op, _INDEX.sub("#", target if node.op == "call_module" else node.target)


def seconds_text(seconds: float) -> str:
    """``0.4 s``, ``12 s``, ``2 min 5 s``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def check_summary(
    *,
    files: int,
    module_files: int,
    statuses: Mapping[str, int],
    severities: Mapping[str, int],
    seconds: float | None = None,
) -> str:
    """The last line of ``fxls check``: files, classes by status, diagnostics by severity.

    ``3 files (2 with module classes) · 4 classes: 3 traced, 0 partial, 1 failed ·
    1 error, 0 warnings, 2 hints · 2.3 s``
    """
    parts = [f"{plural(files, 'file')} ({module_files} with module classes)"]
    classes = sum(statuses.values())
    counts = [f"{statuses.get(s, 0)} {s}" for s in ("traced", "partial", "failed")]
    if statuses.get("skipped"):
        counts.append(f"{statuses['skipped']} skipped")
    parts.append(f"{plural(classes, 'class', 'classes')}: " + ", ".join(counts))
    diags = [
        plural(severities.get("error", 0), "error"),
        plural(severities.get("warning", 0), "warning"),
    ]
    if severities.get("information"):
        diags.append(f"{severities['information']} information")
    if severities.get("hint"):
        diags.append(plural(severities["hint"], "hint"))
    parts.append(", ".join(diags))
    if seconds is not None:
        parts.append(seconds_text(seconds))
    return " · ".join(parts)


def progress_text(done: int, total: int, current: str, seconds: float) -> str:
    """``fxls check [3/12] models/gpt.py · 4.2 s``."""
    return f"fxls check [{done}/{total}] {current} · {seconds_text(seconds)}"


_POSITIONAL_KEYS = ("in_features=", "out_features=", "num_embeddings=", "embedding_dim=")
_DEFAULT_PARTS = {"bias=True", "elementwise_affine=True", "inplace=False", "batch_first=False"}


def _split_top(text: str) -> list[str]:
    """``a, (b, c), d=e`` -> ``["a", "(b, c)", "d=e"]`` (commas outside brackets)."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def module_summary(module_type: str) -> str:
    """A submodule's constructor, briefly: ``Linear(in_features=768, out_features=3072,
    bias=True)`` -> ``Linear(768, 3072)``; parts that repeat a default are left out."""
    name, paren, rest = module_type.partition("(")
    if not paren or not rest.endswith(")"):
        return module_type
    parts = []
    for part in _split_top(rest[:-1]):
        if part in _DEFAULT_PARTS:
            continue
        for key in _POSITIONAL_KEYS:
            if part.startswith(key):
                part = part[len(key) :]
        parts.append(part)
    return f"{name}({', '.join(parts)})"


# -- the expressions a call wrote -----------------------------------------------------------

_MAX_SOURCE = 2_000
"""Longest call text parsed for its argument expressions."""


def span_text(lines: Sequence[str], span: Span | None) -> str | None:
    """The document text of ``span`` (lines joined with ``\n``), or None."""
    if span is None or not 1 <= span.line <= span.end_line <= len(lines):
        return None
    if span.line == span.end_line:
        return lines[span.line - 1][span.col : span.end_col]
    parts = [lines[span.line - 1][span.col :], *lines[span.line : span.end_line - 1]]
    parts.append(lines[span.end_line - 1][: span.end_col])
    text = "\n".join(parts)
    return text if len(text) <= _MAX_SOURCE else None


@dataclass
class CallParts:
    """The expressions a call passes, as written: receiver, positional, keywords."""

    func: str | None = None
    receiver: str | None = None
    positional: list[str] = field(default_factory=list)
    keywords: dict[str, str] = field(default_factory=dict)
    subscript: bool = False
    """``x[:, -1]``: what ``operator.getitem`` is written as."""


def parse_expression(source: str) -> ast.Expression | None:
    """``source`` as an expression, or None; quiet about the user's invalid escapes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(source, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def call_parts(text: str | None) -> CallParts | None:
    """Parse ``self.c_fc(x)``, ``x.view(B, T, C)``, ``a + b``, ``x[:, -1]`` into the
    expressions the user wrote (whitespace runs collapsed), or None."""
    if not text or len(text) > _MAX_SOURCE:
        return None
    source = "(" + text + "\n)"
    tree = parse_expression(source)
    if tree is None:
        return _augmented(text)

    def seg(node: ast.AST) -> str:
        return " ".join((ast.get_source_segment(source, node) or "?").split())

    body = tree.body
    if isinstance(body, ast.Call):
        receiver = seg(body.func.value) if isinstance(body.func, ast.Attribute) else None
        keywords = {kw.arg: seg(kw.value) for kw in body.keywords if kw.arg}
        return CallParts(seg(body.func), receiver, [seg(a) for a in body.args], keywords)
    if isinstance(body, ast.BinOp):
        return CallParts(None, None, [seg(body.left), seg(body.right)])
    if isinstance(body, ast.Subscript):
        return CallParts(None, None, [seg(body.value), seg(body.slice)], subscript=True)
    if isinstance(body, ast.UnaryOp):
        return CallParts(None, None, [seg(body.operand)])
    if isinstance(body, ast.Compare) and len(body.comparators) == 1:
        return CallParts(None, None, [seg(body.left), seg(body.comparators[0])])
    return None


def _augmented(text: str) -> CallParts | None:
    """``out += identity`` (one line): the target and the value, as for ``out + identity``."""
    if "\n" in text:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(text.strip())
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.AugAssign):
        return None
    stmt, source = tree.body[0], text.strip()

    def seg(node: ast.AST) -> str:
        return " ".join((ast.get_source_segment(source, node) or "?").split())

    return CallParts(None, None, [seg(stmt.target), seg(stmt.value)])


def argument_texts(node: NodeInfo, parts: CallParts | None) -> dict[str, str]:
    """Argument name -> the expression the call wrote for it (as far as it can be told)."""
    if parts is None or not _own_call(parts, node):
        return {}
    out: dict[str, str] = {}
    args = list(node.args)
    queue = list(parts.positional)
    last: Arg | None = None
    if node.op == "call_method" and args and parts.func is not None:
        if parts.receiver is not None:  # else the span starts at the method's name
            out[args[0].name] = parts.receiver
        args = args[1:]
    for arg in args:
        if arg.name in parts.keywords:
            out[arg.name] = parts.keywords[arg.name]
        elif arg.kind == "var_positional":
            if queue:
                out[arg.name] = ", ".join(queue)
                queue = []
        elif arg.kind in ("keyword_only", "var_keyword") or arg.default:
            continue
        elif queue:
            out[arg.name] = queue.pop(0)
            last = arg
    if queue and last is not None and last.value.startswith(("[", "(")):
        # x.view(B, T, C): the schema takes one list (size) that the call spread out
        out[last.name] = "(" + ", ".join([out[last.name], *queue]) + ")"
    return out


def _own_call(parts: CallParts, node: NodeInfo) -> bool:
    """Whether the code written there is ``node``'s own call: the same function or method
    name (``F.conv2d`` and ``torch.conv2d``), not code of a library it called
    (``past_key_values.update(…)``, where ``update`` made ``torch.cat``); a subscript for an
    element of a tuple (a fake run places one it cannot place better at the call using it);
    any written call for a submodule (``block(x)`` calls ``h.0``) and operators."""
    if node.target.endswith("getitem"):
        return parts.subscript
    if parts.func is None or node.op not in ("call_function", "call_method"):
        return True
    return parts.func.rsplit(".", 1)[-1] == node.target.rsplit(".", 1)[-1]


_WORD = re.compile(r"[A-Za-z_]\w*")


def fallback_text(
    arg: Arg, by_name: Mapping[str, NodeInfo], lines: Sequence[str], at: Span | None = None
) -> str:
    """An argument's expression when the call text did not tell: a placeholder's name, the
    producing node's own source (one short line), a literal; never an FX node name. When the
    producing node is at the reader's span ``at`` too (both inside one call of a block of
    another file), that source is the enclosing call, so the producer is named by what it
    calls: ``group_norm(…)``."""
    source = by_name.get(arg.node) if arg.node else None
    if source is not None:
        if source.op == "placeholder":
            return source.target
        if at is not None and _span_key(source.span or source.call_site) == _span_key(at):
            return f"{short_target(source)}(…)"
        text = span_text(lines, source.span)
        if text and "\n" not in text and len(text) <= 60:
            return text
        return "…"
    internal = {n for n, info in by_name.items() if info.op != "placeholder"}
    if any(w in internal for w in _WORD.findall(arg.value)):
        return "…"
    return arg.value


def pass_counts(run: PassResult) -> str:
    """``5 → 6 nodes: 2 added · 0 removed · 1 replaced`` for a user pass (``not run``, or no
    graph after when it failed before returning one)."""
    if run.status == "not run":
        return "not run"
    if run.after == 0 and run.status == "failed" and not run.changes:
        return f"{plural(run.before, 'node')} before; no graph after"
    changes = f"{run.added} added · {run.removed} removed · {run.replaced} replaced"
    return f"{run.before} → {plural(run.after, 'node')}: {changes}"


# -- which run of the code a value belongs to ------------------------------------------------


def owner(node: NodeInfo, containers: Collection[str]) -> str:
    """The module instance whose code wrote ``node``: its ``module_path`` without the
    containers (``ModuleResult.containers``) it was made inside (``features.3`` for a layer
    of ``features.3.conv``, a ``Sequential`` that ``features.3`` calls)."""
    path = node.module_path or ""
    while path and path in containers:
        path = path.rpartition(".")[0]
    return path


def _path(node: NodeInfo) -> str:
    """The module instance a node runs in, a call_module node's own submodule included."""
    return node.target if node.op == "call_module" else (node.module_path or "")


@dataclass
class Run:
    """One execution of a piece of code (a line, a call): the nodes it made, in graph order."""

    nodes: list[NodeInfo]
    owner: str
    """The instance whose code ran (``features.3``; ``""`` for the class captured)."""
    site: Span | None
    """Where the class's own code called into it (``NodeInfo.call_site``)."""
    outer: str | None = None
    """For code the class's own code called into: the submodule it called there."""
    module: ModuleResult | None = None
    """The captured class the run belongs to."""
    label: str = ""
    """Which run this is, in words: ``features.3``, ``the call at line 34``, ``run 2``."""
    kind: str = "runs"
    """What the runs of a piece of code are: ``instances``, ``calls`` or ``runs``."""
    direct: bool = False
    """Whether the run's first node is a submodule its code calls itself."""
    written: list[bool] = field(default_factory=list)
    """Per node, whether it is written in the code itself (not in code it calls), when the
    caller keeps that."""

    @property
    def where(self) -> str:
        """The instance that ran, in its class's capture (``""``: the class itself); for a
        submodule the code calls itself (``block(x)`` in a loop), that submodule."""
        if self.owner or self.outer:
            return self.owner or self.outer or ""
        return self.nodes[0].target if self.direct and self.nodes else ""


def executions(
    nodes: Sequence[NodeInfo],
    containers: Collection[str],
    written: Callable[[NodeInfo], bool],
    module: ModuleResult | None = None,
) -> list[Run]:
    """The runs of one piece of code among ``nodes`` (graph order), labelled.

    ``written(node)`` tells a node written in that code (its span is there) from one made
    by code it calls (its call site is there). A new run starts where the instance that
    runs the code changes (``features.3`` → ``features.5``), where the class's code calls it
    from another place, where the submodule called there changes (``h.0`` → ``h.1`` in a
    loop of ``forward``), or where the first node of the run comes again (a loop, a helper
    called twice).
    """
    called = set(containers)
    for node in nodes:
        called.add(node.module_path or "")
        if node.op == "call_module":
            called.add(node.target)
    runs: list[Run] = []
    current: Run | None = None
    readers = _readers(nodes)
    for index, node in enumerate(nodes):
        mine = written(node)
        who = owner(node, containers) if mine else ""
        outer = None if mine else _outermost(_path(node), called)
        # for code of a submodule or helper, where the class's own code called into it; none
        # for the class's own code (a node written there has its own expression as call site,
        # and a node made by code it calls is part of the same run of it)
        site = node.call_site if mine and node.call_site != node.span else None
        if (
            current is None
            or who != current.owner
            or site != current.site
            or (outer is not None and current.outer is not None and outer != current.outer)
            or (
                (mine or not outer)  # a submodule's runs are told apart by ``outer``
                and _again(node, current.nodes[0], _direct(node, who, mine) and current.direct, who)
                and not _unfinished(current, node, index, nodes, readers)
            )
        ):
            current = Run([], who, site, outer, module)
            current.direct = _direct(node, who, mine)
            runs.append(current)
        elif current.outer is None:
            current.outer = outer
        current.nodes.append(node)
    label_runs(runs)
    return runs


def _readers(nodes: Sequence[NodeInfo]) -> dict[str, list[int]]:
    """Node name -> the indexes of the nodes among ``nodes`` that read it."""
    out: dict[str, list[int]] = {}
    for index, node in enumerate(nodes):
        for name in node.inputs:
            out.setdefault(name, []).append(index)
    return out


def _unfinished(
    run: Run,
    node: NodeInfo,
    index: int,
    nodes: Sequence[NodeInfo],
    readers: Mapping[str, list[int]],
) -> bool:
    """Whether ``run`` still goes on past ``node`` (``nodes[index]``), which repeats its
    first call: ``node`` reads none of the run's nodes, and a later node reads one of them
    that is no repetition of the run's own calls (``torch.stack`` of ``[self.fc(x) for _ in
    range(3)]``; ``torch.cat`` of the ``torch.tensor([])`` a cache makes twice) or comes after
    the run ``node`` would start, as long as this one. The next iteration of a loop reads
    what the last one made by a repetition of its calls (``h = h + self.fc(x)``)."""
    names = {n.name for n in run.nodes}
    if names.intersection(node.inputs):
        return False
    calls = {_call_key(n, run.owner) for n in run.nodes}
    for name in names:
        for later in readers.get(name, ()):
            if later <= index:
                continue
            if later >= index + len(run.nodes) or _call_key(nodes[later], run.owner) not in calls:
                return True
    return False


def _call_key(node: NodeInfo, who: str) -> tuple[str, str, tuple[int, int, int, int] | None]:
    """What makes two nodes the same call of the code: operation, target and span; a layer
    of another item of the list ``who`` is the same call (:func:`_item`: ``blocks.1.norm``
    repeats ``blocks.0.norm``, the next iteration of a loop over ``blocks``)."""
    span = node.span
    where = (span.line, span.col, span.end_line, span.end_col) if span is not None else None
    return node.op, _item(node.target, who), where


def _direct(node: NodeInfo, who: str, written: bool) -> bool:
    """A submodule the code itself calls (not a layer of a container it calls)."""
    return written and node.op == "call_module" and (node.module_path or "") == who


def _outermost(path: str, called: Collection[str]) -> str:
    """The first module on ``path`` that was called (``transformer.h.3`` for
    ``transformer.h.3.attn.c_attn``: ``transformer`` and ``transformer.h`` are containers
    nothing calls)."""
    parts = path.split(".") if path else []
    for index in range(1, len(parts) + 1):
        prefix = ".".join(parts[:index])
        if prefix in called:
            return prefix
    return path


def _again(node: NodeInfo, first: NodeInfo, direct: bool, who: str = "") -> bool:
    """Whether ``node`` starts another run of the code ``first`` started: the same call at
    the same place with the same arguments but for the values it reads (the next iteration
    of a loop, the second call of a helper); the items of one unpacking differ in their
    index and stay one run. A submodule the code calls itself (``direct``) counts as the same
    whatever its index (``for block in self.h: y = block(y)`` calls ``h.0``, then ``h.1``);
    the layers of a container it calls do not (``features.3.conv.0.0`` and ``...conv.1.0``
    are one call of ``conv``), nor those of a submodule's code (``layer1.0.conv1`` and
    ``layer1.1.conv1`` are one call of ``layer1``). A list the code loops over whose items
    run no code of its own (``who``: ``layers``, of a library's layers) counts the same way:
    ``layers.1.norm`` starts the run ``layers.0.norm`` started."""
    if (node.op, node.span) != (first.op, first.span):
        return False
    if _INDEX.sub("#", node.module_path or "") != _INDEX.sub("#", first.module_path or ""):
        return False  # made inside another submodule a library's call runs (`x.shape` twice)
    if node.target != first.target and (
        _INDEX.sub("#", node.target) != _INDEX.sub("#", first.target)
        if direct
        else _item(node.target, who) != _item(first.target, who)
    ):
        return False
    return _constants(node) == _constants(first)


def _item(target: str, who: str) -> str:
    """``target`` with the index of the item of the list ``who`` it is in made general
    (``layers.#.norm`` for ``layers.1.norm`` in ``layers``); else as it is."""
    if not who or not target.startswith(who + "."):
        return target
    index, dot, rest = target[len(who) + 1 :].partition(".")
    return f"{who}.#{dot}{rest}" if index.isdigit() else target


def _constants(node: NodeInfo) -> list[tuple[str, str]]:
    """The arguments of ``node`` but for the nodes they read (``[getitem_3, 2]`` ->
    ``[·0, 2]``: each input by its place among ``node.inputs``)."""
    places = {name: f"·{index}" for index, name in enumerate(node.inputs)}
    out = []
    for arg in node.args:
        if arg.node is not None:
            continue
        value = arg.value
        if any(name in value for name in places):
            value = _WORD.sub(lambda m: places.get(m.group(0), m.group(0)), value)
        out.append((arg.name, value))
    return out


def label_runs(runs: Sequence[Run]) -> None:
    """Name each run by what tells it from the others: the instance (``features.3``; with
    the class for runs of several captured classes, ``MobileNetV2.features.3``), then the
    place its code was called from (``the call at line 34``), then its place in the order
    (``run 2``)."""
    if len(runs) < 2:
        return
    several = len({id(r.module) for r in runs}) > 1
    places = [(_qualified(r) if several else r.where) or "the class" for r in runs]
    sites = [f"the call at line {r.site.line}" if r.site is not None else "" for r in runs]
    distinct = len(set(places)) > 1
    sites_of: dict[str, set[str]] = {}
    for place, site in zip(places, sites):
        sites_of.setdefault(place, set()).add(site)
    kind = "instances" if distinct else "calls"
    labels = []
    for place, site in zip(places, sites):
        parts = [place] if distinct else []
        if len(sites_of[place]) > 1 and site:  # (a run with no call site: the place alone)
            parts.append(site)
            kind = "calls"
        labels.append(", ".join(parts))
    if len(set(labels)) < len(labels):
        kind = "runs"
        seen: dict[str, int] = {}
        for index, label in enumerate(labels):
            seen[label] = seen.get(label, 0) + 1
            labels[index] = f"{label}, run {seen[label]}" if label else f"run {seen[label]}"
    for run, label in zip(runs, labels):
        run.label, run.kind = truncate(label, 60), kind


def _qualified(run: Run) -> str:
    """The run's instance with its class: ``MobileNetV2.features.3``; for a class captured as
    the instance its parent built, that instance (``MobileNetV2.features.1``); for a class
    captured on its own, how it was built (``Fire(64, 16, 64, 64)``)."""
    module = run.module
    if module is None:
        return run.where
    built = module.constructed
    if run.where:
        base = built.text if built is not None and built.source == "parent" else module.name
        return f"{base}.{run.where}"
    if built is not None and (built.source == "parent" or built.text.startswith(module.name)):
        return truncate(built.text, 40)
    return module.name


def runs_across(per_module: Sequence[tuple[ModuleResult, list[Run]]]) -> list[Run]:
    """The runs of one piece of code in every captured class that ran it, the first class's
    first; a class captured as the instance a parent built stands for that instance of the
    parent's runs (which are left out). Labelled across classes when there are several."""
    parents: dict[tuple[str, str], None] = {}
    for module, runs in per_module:
        built = module.constructed
        if runs and built is not None and built.source == "parent" and built.inputs_from:
            path = built.text.removeprefix(built.inputs_from + ".")
            parents[(built.inputs_from, path)] = None
    out: list[Run] = []
    for module, runs in per_module:
        for run in runs:
            if (module.name, run.where) in parents:
                continue
            run.module = module
            out.append(run)
    if len({id(r.module) for r in out}) > 1:
        label_runs(out)
    return out


def escaping(nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
    """The nodes of one run whose values are used after it (by a node outside it or as the
    module's output): what a call returns, when it returns something it made. Empty when it
    returns a value made before it (``if n_rep == 1: return x``) or no tensor at all.
    Parameters and buffers it reads are not what it makes, even when later code reads them
    too (a weight tied to another layer)."""
    inside = {n.name for n in nodes}
    read: dict[str, int] = {}
    for node in nodes:
        for name in node.inputs:
            if name in inside:
                read[name] = read.get(name, 0) + 1
    return [
        n
        for n in nodes
        if n.users > read.get(n.name, 0) and n.op not in ("get_attr", "placeholder")
    ]


def others_text(shown: Run, differ: int, total: int) -> str:
    """``features.3 · 1 of 10 instances · 9 others differ``."""
    others = "1 other differs" if differ == 1 else f"{differ} others differ"
    return f"{shown.label} · 1 of {total} {shown.kind} · {others}"


def example_text(module_sizes: Mapping[str, int]) -> str:
    """``holds for B = 2`` (the example sizes some values hold for only)."""
    return "holds for " + ", ".join(f"{k} = {v}" for k, v in module_sizes.items())


def outputs_hold_for(module: ModuleResult) -> str | None:
    """``holds for B = 2`` when the class's outputs hold for its example sizes only, or
    ``holds for B = 1`` when they hold a number that may be a name of size 0 or 1
    (:func:`fixed_ones`)."""
    sizes = outputs_held_sizes(module)
    return example_text(sizes) if sizes is not None else None


def outputs_held_sizes(module: ModuleResult) -> dict[str, int] | None:
    """The example sizes the class's outputs hold for (see :func:`outputs_hold_for`)."""
    bound = set(module.example_nodes)
    if bound and any(n.op == "output" and n.name in bound for n in module.nodes):
        return dict(module.example_sizes)
    ones = fixed_ones(module)
    if ones and shows_any(module.outputs, ones.values()):
        return ones
    return None


def fixed_ones(module: ModuleResult) -> dict[str, int]:
    """The dimension names of the class's inputs whose example size is 0 or 1 (``B=1``):
    torch makes such sizes numbers from the start, so the shapes show ``1`` wherever the
    name goes (``[1, 1000]`` for ``[B, 1000]``)."""
    return {name: size for name, size in module.input_sizes.items() if size in (0, 1)}


def ones_note(ones: Mapping[str, int], *, short: bool = False) -> str:
    """What a hover says of :func:`fixed_ones`: ``B = 1 in the example: torch fixes sizes
    0 and 1, so a 1 shown may be B (an example of 2 or more keeps the name)``; ``short``:
    ``B = 1 in the example: a 1 shown may be B``."""
    held = ", ".join(f"{k} = {v}" for k, v in ones.items())
    sizes = " or ".join(sorted({str(v) for v in ones.values()}))
    names = " or ".join(ones)
    if short:
        return f"{held} in the example: a {sizes} shown may be {names}"
    return (
        f"{held} in the example: torch fixes sizes 0 and 1, so a {sizes} shown may be "
        f"{names} (an example of 2 or more keeps the name)"
    )


def shows_any(values: Sequence[Value], numbers: Collection[int]) -> bool:
    """Whether a shape among ``values`` has a dimension that is one of ``numbers``."""
    for value in values:
        for dim in value.shape or ():
            if type(dim) is int and dim in numbers:
                return True
    return False


def compile_text(check: CompileCheck | None) -> str | None:
    """What a compile check found, for a lens or a report: ``compiles whole``, ``compiles to
    3 graphs (2 breaks)``, ``compile check stopped after 2 breaks``, ``compile check stopped:
    time limit``; None without a finished check."""
    if check is None or check.status in ("failed", "skipped"):
        return None
    if check.status == "limit":
        return f"compile check stopped: {check.message or 'a limit'}"
    breaks = plural(len(check.breaks), "break")
    if check.status == "stopped":
        return f"compile check stopped after {breaks}"
    if not check.breaks and check.graphs <= 1:
        return "compiles whole"
    return f"compiles to {plural(check.graphs, 'graph')} ({breaks})"
