"""Code lens above each module class: node count, parameters and the input → output shapes."""

from __future__ import annotations

from collections.abc import Sequence

from lsprotocol import types

from fxls.engine.render import compile_text, count_text, outputs_hold_for, plural, values_text
from fxls.lsp.features import markdown as md
from fxls.lsp.features.convert import Encoding, LineMapper, lsp_position
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import Diagnostic, ModuleResult

_MAX_MESSAGE = 80


def _first_line(text: str) -> str:
    """The first line of ``text`` without splitting all of it."""
    end = len(text)
    for stop in ("\n", "\r"):
        found = text.find(stop, 0, end)
        if found != -1:
            end = found
    return text[:end]


def _failure(module: ModuleResult, diagnostics: Sequence[Diagnostic]) -> str:
    errors = [d for d in diagnostics if d.severity == "error"]
    if errors:
        first = errors[0]
        message = _first_line(first.message)
        return f"{md.clip(first.code, 16)} {md.clip(message, _MAX_MESSAGE)}"
    if module.error is not None:
        message = _first_line(module.error.message)
        return md.clip(f"{module.error.type}: {message}", _MAX_MESSAGE)
    return "no graph"


def lens_title(module: ModuleResult, diagnostics: Sequence[Diagnostic] = ()) -> str:
    """``fxls · 177 nodes · 25.6 M params · [B, 3, 224, 224] → [B, 1000]``; the first error
    instead of the shapes when there is one; ``fxls · failed · <error>`` without a graph.
    Inputs left at their defaults (``mask=None``, flags) are not listed (the class hover
    lists every input); when all are, all are.
    Plain text on one line, at most ``markdown.MAX_LABEL`` characters."""
    return md.plain(_title(module, diagnostics), md.MAX_LABEL)


def _title(module: ModuleResult, diagnostics: Sequence[Diagnostic]) -> str:
    if module.status == "skipped":
        return "fxls · skipped"
    parts = ["fxls", *_preliminary(module)]
    if module.status == "failed":
        return f"fxls · failed · {_failure(module, diagnostics)}"
    if module.status == "partial":
        parts.append(f"partial ({strategy_label(module.strategy)})")
    if module.nodes:
        parts.append(plural(len(module.nodes), "node"))
    size = module.default_params if module.default_params is not None else module.params
    if size is not None:  # a build with fewer layers: the class's size, not the build's
        parts.append(f"{count_text(size)} params")
    if any(d.severity == "error" for d in diagnostics):
        parts.append(_failure(module, diagnostics))
    elif module.inputs or module.outputs:
        given = [i for i in module.inputs if i.origin != "default"] or module.inputs
        ins = ", ".join(values_text([i.value], dtype=False) for i in given)
        outs = values_text(module.outputs, dtype=False) or "?"
        held = outputs_hold_for(module)
        if held is not None:
            outs += f" ({held})"
        parts.append(f"{ins} → {outs}")
    built = module.constructed
    if built is not None and built.source == "parent" and built.inputs_from:
        parts.append(f"as {built.text} in {built.inputs_from}")
    elif built is not None and built.assumed:
        parts.append("assumed " + ", ".join(f"{k}={v}" for k, v in built.assumed.items()))
    if any(i.assumed for i in module.inputs):
        parts.append("inputs assumed")
    parts.extend(_compiled(module))
    return " · ".join(parts)


def _preliminary(module: ModuleResult) -> list[str]:
    """``preliminary`` for the shapes of a preview job (until the capture replaces them)."""
    return ["preliminary"] if module.strategy.method == "meta-run" else []


def _compiled(module: ModuleResult) -> list[str]:
    """``compiles whole`` or ``compiles to 3 graphs (2 breaks)`` once the compile check ran."""
    found = compile_text(module.compile)
    return [found] if found is not None else []


def module_diagnostics(
    module: ModuleResult, diagnostics: Sequence[Diagnostic], next_line: int | None = None
) -> list[Diagnostic]:
    """The module's own diagnostics and those between its class line and the next class."""
    own = list(module.diagnostics)
    for d in diagnostics:
        inside = d.span.line >= module.line and (next_line is None or d.span.line < next_line)
        if inside and d not in own:
            own.append(d)
    return own


def not_a_module(module: ModuleResult) -> bool:
    """Skipped because the class is no ``nn.Module`` when the file runs (the AST pass could
    not tell): no lens, it is not fxls's business."""
    return module.status == "skipped" and any(
        note.endswith("is not an nn.Module subclass when the file runs") for note in module.notes
    )


def lsp_code_lenses(
    modules: Sequence[ModuleResult],
    diagnostics: Sequence[Diagnostic],
    current_lines: Sequence[str],
    encoding: Encoding,
    mapper: LineMapper,
) -> list[types.CodeLens]:
    """One lens per module on its (current) class line; none for edited class lines."""
    lenses = []
    starts = sorted({m.line for m in modules})
    for module in modules:
        line = mapper(module.line)
        if line is None or not_a_module(module):
            continue
        following = [s for s in starts if s > module.line]
        found = module_diagnostics(module, diagnostics, following[0] if following else None)
        title = lens_title(module, found)
        pos = lsp_position(line, 0, current_lines, encoding)
        lenses.append(
            types.CodeLens(
                range=types.Range(start=pos, end=pos),
                command=types.Command(title=title, command=""),
            )
        )
    return lenses
