"""Code actions as LSP objects: the list (from the cached analysis) and the resolved edit.

Listing is pure and fast: each :class:`~fxls.engine.fixes.Candidate` whose span is unchanged since
the analysis becomes a ``CodeAction`` without an edit, with everything needed to compute it in
``data`` (uri, document version, class, fix id, kind, span on the current text). The edit is
computed in ``codeAction/resolve`` by the worker; :func:`resolved` turns its outcome into a
``WorkspaceEdit`` of minimal text edits, or a disabled action that says why not
(:func:`refused_message`: the same reason for ``window/showMessage``). An action whose outcome
is already known to be refused is listed disabled with the reason, for clients that show those.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lsprotocol import types

from fxls.engine.fixes import Candidate, applies, minimal_edits
from fxls.lsp.features import markdown as md
from fxls.lsp.features.convert import Encoding, LineMapper, lsp_diagnostic, lsp_position
from fxls.protocol.edits import apply_edits
from fxls.protocol.model import FixOutcome, FixRequest, Span
from fxls.protocol.positions import split_lines

FIX_ALL = "source.fixAll.fxls"
KINDS: list[types.CodeActionKind | str] = [
    types.CodeActionKind.QuickFix,
    types.CodeActionKind.RefactorRewrite,
    FIX_ALL,
]
FIX_ALL_TITLE = "fxls: apply every verified fix"
UNSAFE_HINT = "set `fxls.codeActions.unsafe` to apply it anyway"


@dataclass
class Offered:
    """A candidate on the current text, with the verdict already known for this version."""

    candidate: Candidate
    span: Span
    """The candidate's span on the current text."""
    outcome: FixOutcome | None = None


def kind_of(candidate: Candidate) -> str:
    if candidate.category == "refactor":
        return types.CodeActionKind.RefactorRewrite.value
    return types.CodeActionKind.QuickFix.value


def wanted(only: Sequence[str] | None, kind: str) -> bool:
    """Whether ``kind`` is asked for (``only`` names kinds or their parents)."""
    if not only:
        return True
    return any(kind == o or kind.startswith(f"{o}.") for o in only)


def _range(span: Span, lines: Sequence[str], encoding: Encoding) -> types.Range:
    return types.Range(
        start=lsp_position(span.line, span.col, lines, encoding),
        end=lsp_position(span.end_line, span.end_col, lines, encoding),
    )


def _touches(a: types.Range, b: types.Range) -> bool:
    def key(p: types.Position) -> tuple[int, int]:
        return (p.line, p.character)

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


def _same(a: types.Diagnostic, b: types.Diagnostic) -> bool:
    return a.code == b.code and a.range == b.range


def request_data(offered: Offered, uri: str, version: int | None) -> dict[str, Any]:
    c, s = offered.candidate, offered.span
    return {
        "uri": uri,
        "version": version,
        "fix": c.id,
        "kind": c.kind,
        "class": c.cls,
        "code": c.code,
        "span": [s.line, s.col, s.end_line, s.end_col],
        "params": dict(c.params),
    }


def fix_request(data: Any) -> FixRequest | None:
    """The worker request a listed action carries in ``data`` (None when malformed)."""
    try:
        line, col, end_line, end_col = (int(v) for v in data["span"])
        return FixRequest(
            id=str(data["fix"]),
            kind=data["kind"],
            cls=str(data["class"]),
            span=Span(line, col, end_line, end_col),
            code=data.get("code"),
            params=dict(data.get("params") or {}),
        )
    except (KeyError, TypeError, ValueError):
        return None


def refusal(outcome: FixOutcome | None, unsafe: bool) -> str | None:
    """Why an outcome cannot be applied, for people (None when it can)."""
    if outcome is None or outcome.applicability == "unavailable" or not outcome.edits:
        why = outcome.reason if outcome is not None and outcome.reason else "nothing to change"
        return f"fxls cannot make this fix: {why}"
    if not applies(outcome, unsafe):
        return f"not verified safe: {outcome.reason}; {UNSAFE_HINT}"
    return None


def _title(offered: Offered, unsafe: bool) -> tuple[str, str | None]:
    """The title, and why the action is refused when that is known already (known
    unavailable, or unsafe while unsafe fixes are off)."""
    outcome = offered.outcome
    if outcome is None:
        return offered.candidate.title, None
    why = refusal(outcome, unsafe)
    if why is not None:
        return offered.candidate.title, why
    if outcome.applicability == "unsafe":
        return f"{outcome.title} ({outcome.reason})", None
    return outcome.title, None


def lsp_code_actions(
    offered: Sequence[Offered],
    uri: str,
    version: int | None,
    lines: Sequence[str],
    encoding: Encoding,
    request: types.Range,
    context: types.CodeActionContext,
    *,
    mapper: LineMapper,
    unsafe: bool = False,
    fix_all: bool = False,
    disabled: bool = False,
) -> list[types.CodeAction]:
    """The actions for ``request``: fixes whose span or diagnostic is there, refactors at the
    cursor, and ``source.fixAll.fxls`` when ``fix_all`` and any fix applies to the file.

    An action already known to be refused for this version of the document (resolved before:
    unavailable, or unsafe while unsafe fixes are off) is listed disabled, with the reason,
    for a client that shows disabled actions (``disabled``: ``disabledSupport``), else left
    out."""
    only = [str(getattr(k, "value", k)) for k in context.only] if context.only else None
    actions: list[types.CodeAction] = []
    for item in offered:
        c = item.candidate
        kind = kind_of(c)
        if not wanted(only, kind):
            continue
        title, why = _title(item, unsafe)
        if why is not None and not disabled:
            continue
        rng = _range(item.span, lines, encoding)
        diagnostics = []
        if c.diagnostic is not None:
            converted = lsp_diagnostic(c.diagnostic, uri, lines, encoding, mapper)
            if converted is not None:
                diagnostics.append(converted)
        asked = any(_same(d, mine) for d in context.diagnostics for mine in diagnostics)
        if not (asked or _touches(rng, request)):
            continue
        safe = item.outcome is not None and item.outcome.applicability == "safe"
        actions.append(
            types.CodeAction(
                title=md.plain(title, md.MAX_LABEL),
                kind=kind,
                diagnostics=diagnostics or None,
                is_preferred=True if safe and c.category == "quickfix" else None,
                disabled=types.CodeActionDisabled(reason=md.plain(why)) if why else None,
                data=request_data(item, uri, version),
            )
        )
    if fix_all and wanted(only, FIX_ALL):
        actions.append(
            types.CodeAction(
                title=FIX_ALL_TITLE,
                kind=FIX_ALL,
                data={"uri": uri, "version": version, "fix": "all"},
            )
        )
    return actions


def refused(action: types.CodeAction, reason: str) -> types.CodeAction:
    """The action without an edit, disabled with ``reason`` (the client says why)."""
    action.edit = None
    action.disabled = types.CodeActionDisabled(reason=md.plain(reason))
    return action


def refused_message(action: types.CodeAction) -> str | None:
    """What ``window/showMessage`` says when a resolved action is refused (None when it is
    not): its title and the reason, as plain text. Editors do not read ``disabled`` on a
    resolved action (Neovim 0.11 applies what it holds: nothing), so a refusal would otherwise
    change nothing and say nothing. The server makes every message inert on its way out
    (``markdown.notice``)."""
    if action.disabled is None:
        return None
    title = md.plain(action.title or "this action", md.MAX_LABEL)
    return md.plain(f"{title}: {action.disabled.reason}", md.MAX_NOTICE)


def resolved(
    action: types.CodeAction,
    outcome: FixOutcome | None,
    text: str,
    uri: str,
    version: int | None,
    encoding: Encoding,
    *,
    unsafe: bool = False,
    versioned: bool = True,
) -> types.CodeAction:
    """``action`` with the outcome's edit (minimal text edits on ``text``), or disabled."""
    why = refusal(outcome, unsafe)
    if why is not None:
        return refused(action, why)
    assert outcome is not None
    action.disabled = None
    if outcome.applicability == "unsafe" and md.plain(outcome.reason) not in action.title:
        action.title = md.plain(f"{action.title} ({outcome.reason})", md.MAX_LABEL)
    action.edit = workspace_edit(uri, version, text, apply_edits(text, outcome.edits), encoding,
                                 versioned=versioned)  # fmt: skip
    return action


def text_edits(old: str, new: str, encoding: Encoding) -> list[types.TextEdit]:
    """Minimal LSP text edits (positions in ``encoding``) that turn ``old`` into ``new``."""
    lines = split_lines(old)
    return [
        types.TextEdit(range=_range(edit.span, lines, encoding), new_text=edit.text)
        for edit in minimal_edits(old, new)
    ]


def workspace_edit(
    uri: str,
    version: int | None,
    old: str,
    new: str,
    encoding: Encoding,
    *,
    versioned: bool = True,
) -> types.WorkspaceEdit:
    """One document's edit; versioned (the client refuses it if the document moved on) when
    the client supports ``documentChanges``."""
    edits = text_edits(old, new, encoding)
    if versioned:
        doc = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
        return types.WorkspaceEdit(
            document_changes=[types.TextDocumentEdit(text_document=doc, edits=list(edits))]
        )
    return types.WorkspaceEdit(changes={uri: list(edits)})


@dataclass(frozen=True)
class Cell:
    """The notebook cell an action was listed on: its URI, version and lines, and where a
    line of the notebook's module is in it (``to_cell``: None outside the cell)."""

    uri: str
    version: int | None
    lines: Sequence[str]
    to_cell: Callable[[int], int | None]
    encoding: Encoding = "utf-16"
    """The position encoding the client negotiated."""
    versioned: bool = True
    """The client takes versioned edits (``documentChanges``)."""


def resolved_in_cell(
    action: types.CodeAction,
    outcome: FixOutcome | None,
    text: str,
    cell: Cell,
    *,
    unsafe: bool = False,
) -> types.CodeAction:
    """:func:`resolved` for an action listed on a notebook cell: the outcome's edits are made
    on the notebook's module (``text``) and must fall inside the cell, on lines the module
    has as the cell writes them (not a magic or a line left out of the run); else refused."""
    why = refusal(outcome, unsafe)
    if why is not None:
        return refused(action, why)
    assert outcome is not None
    edits = cell_edits(text, apply_edits(text, outcome.edits), cell)
    if edits is None:
        return refused(action, "the fix changes lines outside this cell, or lines fxls did not run")
    action.disabled = None
    if outcome.applicability == "unsafe" and md.plain(outcome.reason) not in action.title:
        action.title = md.plain(f"{action.title} ({outcome.reason})", md.MAX_LABEL)
    if cell.versioned:
        doc = types.OptionalVersionedTextDocumentIdentifier(uri=cell.uri, version=cell.version)
        change = types.TextDocumentEdit(text_document=doc, edits=list(edits))
        action.edit = types.WorkspaceEdit(document_changes=[change])
    else:
        action.edit = types.WorkspaceEdit(changes={cell.uri: list(edits)})
    return action


def cell_edits(old: str, new: str, cell: Cell) -> list[types.TextEdit] | None:
    """The edits from ``old`` to ``new`` (module texts) on the cell's lines; None when one
    reaches outside the cell or onto a line the module does not have as the cell has it."""
    module = split_lines(old)
    out = []
    for edit in text_edits(old, new, cell.encoding):
        start, end = edit.range.start.line + 1, edit.range.end.line + 1
        first, last = cell.to_cell(start), cell.to_cell(end)
        if first is None or last is None or last - first != end - start:
            return None
        for offset in range(end - start + 1):
            if module[start + offset - 1].rstrip("\r") != cell.lines[first + offset - 1]:
                return None
        rng = types.Range(
            start=types.Position(line=first - 1, character=edit.range.start.character),
            end=types.Position(line=last - 1, character=edit.range.end.character),
        )
        out.append(types.TextEdit(range=rng, new_text=edit.new_text))
    return out
