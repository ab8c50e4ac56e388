"""Pure feature functions on hand-built protocol objects."""

from __future__ import annotations

import textwrap

import pytest
from lsprotocol import types

from fxls.engine import render
from fxls.engine.render import count_text, value_text
from fxls.lsp.features import code_lens, convert, diagnostics, hover, inlay_hints
from fxls.protocol.catalogue import FX201, FX302, docs_url
from fxls.protocol.model import (
    Arg,
    Construction,
    Diagnostic,
    ErrorInfo,
    InputValue,
    ModuleResult,
    NodeInfo,
    Related,
    Span,
    Strategy,
    Value,
)

SOURCE = textwrap.dedent(
    """\
    import torch.nn as nn
    import torch.nn.functional as F


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.h = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

        def forward(self, x, w):
            y = self.conv1(x)
            z = F.conv2d(x, w, stride=2)
            for block in self.h:
                y = block(y)
            out = self.helper(
                y)
            return out

        def helper(self, t):
            return t.relu()
    """
)
LINES = SOURCE.split("\n")


def t(*shape: object, dtype: str = "torch.float32") -> Value:
    return Value(kind="tensor", shape=list(shape), dtype=dtype)  # type: ignore[arg-type]


def span_of(line: int, needle: str) -> Span:
    col = LINES[line - 1].index(needle)
    return Span(line, col, line, col + len(needle))


def made(
    name: str, target: str, span: Span, out: Value, inputs: tuple[str, ...] = (), users: int = 1
) -> NodeInfo:
    """A node of ``target`` (a module's name without dots, else a function or method)."""
    op = "call_module" if target.isidentifier() and target in ("fc", "p", "q") else "call_function"
    return NodeInfo(
        name=name, op=op, target=target, span=span, users=users,  # type: ignore[arg-type]
        inputs=list(inputs), outputs=[out],
    )  # fmt: skip


X = t("B", 3, 224, 224)
CONV1 = NodeInfo(
    name="conv1",
    op="call_module",
    target="conv1",
    span=span_of(12, "self.conv1(x)"),
    call_site=span_of(12, "self.conv1(x)"),
    args=[Arg(name="input", value="x", node="x")],
    signature="module.forward",
    outputs=[t("B", 64, 112, 112)],
    module_type="Conv2d(3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)",
    module_path="conv1",
    users=1,
    inputs=["x"],
)
CONV2D = NodeInfo(
    name="conv2d",
    op="call_function",
    target="torch.nn.functional.conv2d",
    span=span_of(13, "F.conv2d(x, w, stride=2)"),
    call_site=span_of(13, "F.conv2d(x, w, stride=2)"),
    args=[
        Arg(name="input", value="x", node="x"),
        Arg(name="weight", value="w", node="w"),
        Arg(name="bias", value="None", default=True),
        Arg(name="stride", value="2"),
        Arg(name="padding", value="0", default=True),
        Arg(name="dilation", value="1", default=True),
        Arg(name="groups", value="1", default=True),
    ],
    signature="python",
    outputs=[t("B", 8, 109, 109)],
)
LOOP = [
    NodeInfo(
        name=f"h_{i}",
        op="call_module",
        target=f"h.{i}",
        span=span_of(15, "block(y)"),
        call_site=span_of(15, "block(y)"),
        args=[Arg(name="input", value="y" if i == 0 else f"h_{i - 1}", node="conv1")],
        outputs=[t("B", 64, 112, 8)],
        module_type="Linear(in_features=8, out_features=8, bias=True)",
        module_path=f"h.{i}",
        users=1,
        inputs=["conv1" if i == 0 else f"h_{i - 1}"],
    )
    for i in range(3)
]
RELU = NodeInfo(
    name="relu",
    op="call_method",
    target="relu",
    span=span_of(21, "t.relu()"),
    call_site=Span(16, LINES[15].index("self.helper("), 17, LINES[16].index(")") + 1),
    args=[Arg(name="self", value="h_2", node="h_2")],
    outputs=[t("B", 64, 112, 8)],
    users=1,  # the output
    inputs=["h_2"],
)
PLACEHOLDERS = [
    NodeInfo(name="x", op="placeholder", target="x", outputs=[X]),
    NodeInfo(name="w", op="placeholder", target="w", outputs=[t(8, 3, 7, 7)]),
]
MODULE = ModuleResult(
    name="Net",
    line=5,
    status="traced",
    strategy=Strategy("fx"),
    build="meta",
    params=25_557_032,
    buffers=53_120,
    inputs=[InputValue("x", X, assumed=True, origin="assumed"), InputValue("w", t(8, 3, 7, 7))],
    outputs=[t("B", 64, 112, 8)],
    nodes=[*PLACEHOLDERS, CONV1, CONV2D, *LOOP, RELU],
    timings={"init": 0.1, "trace": 0.2},
)


def hover_at(line: int, needle: str, offset: int = 0) -> hover.HoverText | None:
    col = LINES[line - 1].index(needle) + offset
    return hover.hover_text([MODULE], LINES, line, col, isolation=["seccomp", "rlimits"])


def test_hover_call_module_shows_output_first_then_the_module_and_its_arguments() -> None:
    result = hover_at(12, "conv1", 2)
    assert result is not None
    md = result.markdown
    assert md.startswith(
        "→ `[B, 64, 112, 112] float32`\n\nconv1 · `Conv2d(3, 64, kernel_size=(7, 7)"
    )
    assert "| input | `x` | `[B, 3, 224, 224] float32` |" in md
    assert result.span == CONV1.span


def test_hover_call_function_lists_defaults_last() -> None:
    result = hover_at(13, "conv2d")
    assert result is not None
    md = result.markdown
    assert "| stride | `2` |  |" in md
    assert "| padding | `0` | *default* |" in md
    assert "| weight | `w` | `[8, 3, 7, 7] float32` |" in md
    assert md.index("stride") < md.index("bias")  # explicit arguments before defaults


def test_hover_argument_expressions_are_the_source_text_never_node_names() -> None:
    # the loop's Linear reads `h_1` (a node name); the hover shows what the user wrote
    result = hover_at(15, "block")
    assert result is not None
    assert "`y`" in result.markdown and "h_1" not in result.markdown


def test_hover_loop_aggregates_iterations() -> None:
    result = hover_at(15, "block")
    assert result is not None
    assert "`×3: h.0 … h.2`" in result.markdown
    assert result.markdown.count("Linear") == 1


def test_hover_block_style_is_one_code_block_with_aligned_columns() -> None:
    result = hover.hover_text([MODULE], LINES, 13, LINES[12].index("conv2d"), style="block")
    assert result is not None
    lines = result.markdown.split("\n")
    assert lines[0] == "```text" and lines[-1] == "```"
    assert lines[1] == "→ [B, 8, 109, 109] float32"
    assert lines[2] == "torch.nn.functional.conv2d"
    assert lines[3] == "  input     x     [B, 3, 224, 224] float32"
    assert "  padding   0     (default)" in lines
    assert "|" not in result.markdown


def test_style_for_client() -> None:
    assert hover.style_for_client("Neovim") == "block"
    assert hover.style_for_client("Visual Studio Code") == "table"
    assert hover.style_for_client(None) == "table"


def test_hover_helper_node_at_its_own_span_and_at_the_call_site() -> None:
    own = hover_at(21, "relu")
    assert own is not None and "Tensor.relu" in own.markdown
    call = hover_at(16, "helper")
    assert call is not None and "self.helper" in call.markdown
    assert hover_at(17, "y)") is not None  # second line of the multi-line call


def test_hover_prefers_smallest_span() -> None:
    outer = NodeInfo(
        name="outer", op="call_function", target="f", span=Span(12, 0, 12, 40), outputs=[X]
    )
    module = ModuleResult(name="Net", line=5, status="traced", nodes=[outer, CONV1])
    result = hover.hover_text([module], LINES, 12, LINES[11].index("conv1"))
    assert result is not None and "conv1 · " in result.markdown


def test_hover_nothing_outside_nodes() -> None:
    assert hover_at(6, "__init__") is None
    assert hover.hover_text([MODULE], LINES, 1, 0) is None


def test_hover_class_summary() -> None:
    result = hover_at(5, "Net", 1)
    assert result is not None
    md = result.markdown
    assert md.startswith("Net · nn.Module · traced (fx)")
    assert "| parameters | 25.6 M (25,557,032) |" in md
    assert "| buffers | 53,120 |" in md
    assert "2 placeholder" in md and "4 call_module" in md
    assert "| input x | `[B, 3, 224, 224] float32 (assumed)` |" in md
    assert "| input w | `[8, 3, 7, 7] float32 (declared)` |" in md
    assert "| output | `[B, 64, 112, 8] float32` |" in md
    assert "seccomp, rlimits" in md
    assert "| capture time | 0.30 s |" in md
    assert "fx, built on meta" in md
    assert result.span == Span(5, 6, 5, 9)


def test_hover_class_construction_and_grammar() -> None:
    from fxls.protocol.model import Construction

    one = NodeInfo(name="x", op="placeholder", target="x", outputs=[X])
    module = ModuleResult(
        name="Net",
        line=5,
        status="traced",
        nodes=[one],
        notes=["specialized T=8"],
        constructed=Construction(source="parent", text="transformer.h.0", inputs_from="GPT"),
    )
    md = hover.class_markdown(module, style="block")
    assert "1 node:" in md and "1 nodes" not in md
    assert "built by GPT.forward as transformer.h.0" in md
    assert "specialized T=8" in md
    module.constructed = Construction(
        source="assumed",
        text="Net(dim=64, heads=4)",
        assumed={"dim": "64", "heads": "4"},
        pin="dim=64, heads=4",
    )
    md = hover.class_markdown(module, style="block")
    assert "assumed: dim=64, heads=4 — pin with # fxls: init(dim=64, heads=4)" in md


def test_a_class_hover_says_how_many_notes_it_leaves_out() -> None:
    notes = [f"note number {i}" for i in range(1, 9)]
    module = ModuleResult(name="Net", line=5, status="traced", notes=notes)
    md = hover.class_markdown(module, style="block")
    assert all(f"note number {i}" in md for i in range(1, 7)), md
    assert "note number 7" not in md and "2 more notes" in md
    module.notes = notes[:6]
    assert "more note" not in hover.class_markdown(module, style="block")


def test_format_helpers() -> None:
    assert count_text(25_557_032) == "25.6 M"
    assert count_text(950) == "950"
    assert count_text(12_345) == "12.3 k"
    assert value_text(Value(kind="int", text="T")) == "T"
    assert value_text(Value(kind="none")) == "None"
    assert value_text(t("B", 4, dtype="torch.int64")) == "[B, 4] int64"


def test_inlay_hints_one_per_statement_last_node() -> None:
    hints = inlay_hints.shape_hints([MODULE], SOURCE)
    by_line = {h.line: h for h in hints}
    assert by_line[12].label == "▸ [B, 64, 112, 112]"
    assert by_line[13].label == "▸ [B, 8, 109, 109]"
    # one iteration of the loop (the first), not the last one's output: all three agree
    assert by_line[15].label == "▸ [B, 64, 112, 8]" and by_line[15].node == "h_0"
    assert by_line[21].node == "relu"
    assert by_line[17].node == "relu"  # `out = self.helper(\n y)` ends on line 17
    assert set(by_line) == {12, 13, 15, 17, 21}


def test_inlay_hints_multiline_statement_goes_to_its_last_line() -> None:
    node = NodeInfo(
        name="n", op="call_function", target="f", span=Span(16, 14, 17, 14), outputs=[X]
    )
    module = ModuleResult(name="Net", line=5, status="traced", nodes=[node])
    (hint,) = inlay_hints.shape_hints([module], SOURCE)
    assert hint.line == 17


def test_inlay_hints_only_for_a_value_the_statement_makes() -> None:
    """A line's hint names the value of its statement (or of a branch of a conditional one):
    a node of a part of it (``x.shape`` of ``x.shape[:-1]``, whose slicing a fake run does
    not record) gives none, rather than the wrong value as the line's."""
    source = (
        "def f(self, x):\n"
        "    n = x.shape[:-1]\n"
        "    y = self.fc(x) if n else x\n"
        "    return y.view(*n, -1)\n"
    )
    size = Value(kind="size", shape=["B", "T", 8], text="[B, T, 8]")
    shape = made("getattr_1", "getattr", Span(2, 8, 2, 15), size)
    fc = made("fc", "fc", Span(3, 8, 3, 18), t("B", "T", 8))
    view = made("view", "view", Span(4, 11, 4, 25), t("B", "T", 8))
    module = ModuleResult(name="Net", line=1, status="traced", nodes=[shape, fc, view])
    labels = {h.line: h.label for h in inlay_hints.shape_hints([module], source)}
    assert labels == {3: "▸ [B, T, 8]", 4: "▸ [B, T, 8]"}


def test_lsp_inlay_hints_position_end_of_line_and_range_filter() -> None:
    hints = inlay_hints.shape_hints([MODULE], SOURCE)
    visible = types.Range(types.Position(11, 0), types.Position(12, 0))
    out = inlay_hints.lsp_inlay_hints(hints, LINES, convert.UTF16, lambda n: n, visible)
    assert [h.position.line for h in out] == [11, 12]
    assert out[0].position.character == len(LINES[11])
    dropped = inlay_hints.lsp_inlay_hints(
        hints, LINES, convert.UTF16, lambda n: None if n == 12 else n
    )
    assert 11 not in [h.position.line for h in dropped]


def test_code_lens_title() -> None:
    title = code_lens.lens_title(MODULE)
    assert title == (
        "fxls · 8 nodes · 25.6 M params · [B, 3, 224, 224], [8, 3, 7, 7] → [B, 64, 112, 8]"
        " · inputs assumed"
    )


def test_code_lens_leaves_out_inputs_at_their_defaults() -> None:
    # x-transformers' TransformerWrapper has 35 parameters with defaults: the lens listed
    # "[B, T], False, False, False, ..., None" past the edge of the editor
    from dataclasses import replace

    from fxls.protocol.model import InputValue, Value

    flags = [
        InputValue(f"flag{i}", Value(kind="bool", text="False"), origin="default")
        for i in range(30)
    ]
    wrapper = replace(MODULE, inputs=[MODULE.inputs[0], *flags])
    title = code_lens.lens_title(wrapper)
    assert "[B, 3, 224, 224] → [B, 64, 112, 8]" in title and "False" not in title, title
    only_defaults = replace(MODULE, inputs=flags[:2])
    assert "False, False → [B, 64, 112, 8]" in code_lens.lens_title(only_defaults)


def test_code_lens_says_how_the_instance_was_built() -> None:
    from dataclasses import replace

    from fxls.protocol.model import Construction

    block = replace(
        MODULE,
        inputs=[replace(i, assumed=False, origin="declared") for i in MODULE.inputs],
        constructed=Construction(source="parent", text="transformer.h.0", inputs_from="GPT"),
    )
    assert code_lens.lens_title(block).endswith("· as transformer.h.0 in GPT")
    guessed = replace(
        block,
        constructed=Construction(
            source="assumed", text="Net(dim=64)", assumed={"dim": "64", "heads": "4"}
        ),
    )
    assert code_lens.lens_title(guessed).endswith("· assumed dim=64, heads=4")


def test_code_lens_partial_capture_shows_the_first_error() -> None:
    partial = ModuleResult(
        name="Net", line=5, status="partial", strategy=Strategy("fx"), nodes=[CONV1], params=68
    )
    diag = FX201(Span(12, 0, 12, 5), node="conv1", error="bad").diagnostic()
    title = code_lens.lens_title(partial, [diag])
    assert title == "fxls · partial (fx) · 1 node · 68 params · FX201 shape error in `conv1`: bad"


def test_code_lens_failure_summary() -> None:
    failed = ModuleResult(
        name="Net",
        line=5,
        status="failed",
        error=ErrorInfo(kind="exception", phase="trace", type="TraceError", message="boom"),
    )
    diag = FX201(Span(12, 0, 12, 5), node="conv1", error="bad").diagnostic()
    assert (
        code_lens.lens_title(failed, [diag]) == "fxls · failed · FX201 shape error in `conv1`: bad"
    )
    assert code_lens.lens_title(failed) == "fxls · failed · TraceError: boom"
    lenses = code_lens.lsp_code_lenses([failed], [diag], LINES, convert.UTF16, lambda n: n + 2)
    assert lenses[0].range.start.line == 6
    assert lenses[0].command is not None and "failed" in lenses[0].command.title


# -- position conversion ----------------------------------------------------------------

NON_ASCII = "    y = 'ä😀' + self.conv1(x)"


@pytest.mark.parametrize(
    ("encoding", "expected"),
    [(convert.UTF16, 16), (convert.UTF8, 19), (convert.UTF32, 15)],
)
def test_columns_after_non_ascii(encoding: str, expected: int) -> None:
    col = NON_ASCII.index("self")  # 'ä' is 1 UTF-16 unit (2 bytes), the emoji 2 units (4 bytes)
    assert col == 15
    pos = convert.lsp_position(1, col, [NON_ASCII], encoding)
    assert pos == types.Position(line=0, character=expected)
    assert convert.position_from_lsp(pos, [NON_ASCII], encoding) == (1, col)


def test_position_inside_surrogate_pair_maps_to_its_code_point() -> None:
    emoji = NON_ASCII.index("😀")
    start = convert.to_units(NON_ASCII, emoji, convert.UTF16)
    assert convert.from_units(NON_ASCII, start + 1, convert.UTF16) == emoji
    assert convert.from_units(NON_ASCII, 10_000, convert.UTF16) == len(NON_ASCII)


def test_lsp_range_clamps_and_maps_lines() -> None:
    rng = convert.lsp_range(Span(1, 4, 1, 999), [NON_ASCII, ""], convert.UTF16, lambda n: n + 1)
    assert rng is None or rng.start.line == 1
    rng = convert.lsp_range(Span(1, 4, 1, 999), [NON_ASCII], convert.UTF16)
    assert rng is not None and rng.end.character == convert.units(NON_ASCII, convert.UTF16)
    assert convert.lsp_range(Span(1, 0, 2, 0), [NON_ASCII], convert.UTF16, lambda n: None) is None


def test_hover_with_non_ascii_before_the_call() -> None:
    lines = [NON_ASCII]
    col = NON_ASCII.index("self.conv1(x)")
    node = NodeInfo(
        name="conv1",
        op="call_module",
        target="conv1",
        span=Span(1, col, 1, col + len("self.conv1(x)")),
        outputs=[X],
    )
    module = ModuleResult(name="Net", line=99, status="traced", nodes=[node])
    pos = types.Position(line=0, character=convert.to_units(NON_ASCII, col + 6, convert.UTF16))
    line, c = convert.position_from_lsp(pos, lines, convert.UTF16)
    text = hover.hover_text([module], lines, line, c)
    result = hover.lsp_hover(text, lines, convert.UTF16, lambda n: n)
    assert result is not None and result.range is not None
    assert result.range.start.character == 16  # 15 code points, the emoji counts twice
    assert result.range.end.character == 16 + len("self.conv1(x)")


def test_lsp_diagnostic_fields() -> None:
    diag = Diagnostic(
        code="FX201",
        severity="error",
        message="shape error",
        span=Span(12, 8, 12, 21),
        fix="Do this.",
        related=[Related(span=Span(8, 8, 8, 20), message="defined here")],
        data={"node": "conv1"},
    )
    unused = FX302(Span(13, 8, 13, 32), node="conv2d").diagnostic()
    out = diagnostics.lsp_diagnostics(
        [diag, diag, unused], "file:///a.py", LINES, convert.UTF16, lambda n: n
    )
    assert len(out) == 2
    first, second = out
    assert first.code == "FX201" and first.source == "fxls"
    assert first.severity == types.DiagnosticSeverity.Error
    assert first.code_description is not None
    assert first.code_description.href == docs_url("FX201")
    assert first.range == types.Range(types.Position(11, 8), types.Position(11, 21))
    assert first.related_information is not None
    assert first.related_information[0].location.range.start.line == 7
    assert first.message.startswith("shape error") and "Do this." in first.message
    assert first.data == {"node": "conv1", "fix": "Do this."}
    assert second.tags == [types.DiagnosticTag.Unnecessary]
    assert second.severity == types.DiagnosticSeverity.Hint


def test_diagnostics_on_edited_lines_are_dropped_and_others_shifted() -> None:
    diag = FX201(Span(12, 8, 12, 21), node="conv1", error="x").diagnostic()
    other = FX201(Span(15, 8, 15, 16), node="h_0", error="x").diagnostic()

    def mapper(n: int) -> int | None:
        return None if n == 12 else n + 3

    out = diagnostics.lsp_diagnostics([diag, other], "file:///a.py", LINES, convert.UTF16, mapper)
    assert [d.range.start.line for d in out] == [17]


def test_code_lens_uses_only_the_diagnostics_of_its_own_class() -> None:
    first = ModuleResult(
        name="A", line=5, status="traced", nodes=[CONV1], inputs=[InputValue("x", X)], outputs=[X]
    )
    second = ModuleResult(
        name="B", line=20, status="partial", strategy=Strategy("fx"), nodes=[CONV1]
    )
    diag = FX201(Span(25, 0, 25, 5), node="fc", error="bad").diagnostic()
    lenses = code_lens.lsp_code_lenses(
        [first, second], [diag], LINES + [""] * 20, convert.UTF16, lambda n: n
    )
    titles = [lens.command.title for lens in lenses if lens.command]
    assert "FX201" not in titles[0] and "→" in titles[0]
    assert "FX201" in titles[1]


def test_hover_traced_through_loop_summarises_iterations() -> None:
    call_site = span_of(15, "block(y)")
    nodes = [
        NodeInfo(
            name=f"{op}_{i}",
            op="call_function",
            target=f"torch.{op}",
            span=Span(30, 8, 30, 20),
            call_site=call_site,
            outputs=[t("B", 64)],
            module_path=f"h.{i}",
            users=1,  # y -> add_0 -> relu_0 -> add_1 ... -> the output
            inputs=[f"add_{i}"] if op == "relu" else [f"relu_{i - 1}" if i else "y"],
        )
        for i in range(48)
        for op in ("add", "relu")
    ]
    y = NodeInfo(name="y", op="placeholder", target="y", outputs=[t("B", 64)], users=1)
    module = ModuleResult(name="Net", line=5, status="traced", nodes=[y, *nodes])
    result = hover.hover_text([module], LINES, 15, call_site.col + 1)
    assert result is not None
    assert result.markdown.startswith("→ `[B, 64] float32`\n\nblock\n\n`×48: h.0 … h.47`")
    assert "| add |  | `[B, 64] float32` |\n| relu |" in result.markdown  # one iteration


def test_hover_markdown_puts_shapes_in_code_spans() -> None:
    """A bare ``[B, 64]`` is link syntax to some Markdown views (Neovim hides the brackets)."""
    result = hover_at(12, "conv1", 2)
    assert result is not None
    outside = result.markdown.split("`")[::2]  # the text between code spans
    assert not any("[" in part for part in outside), result.markdown


def test_inlay_hints_one_part_per_name_on_unpacking_lines_and_the_hover_agrees() -> None:
    source = "def forward(self, x):\n    B, T, C = x.size()\n    return x\n"
    lines = source.split("\n")
    size = NodeInfo(
        name="size", op="call_method", target="size", span=Span(2, 14, 2, 22),
        args=[Arg(name="self", value="x", node="x")], outputs=[Value(kind="size", shape=["B", "T", 768])],
    )  # fmt: skip
    getitems = [
        NodeInfo(
            name=f"getitem_{i}",
            op="call_function",
            target="operator.getitem",
            span=Span(2, 4, 2, 11),
            args=[Arg(name="a", value="size", node="size"), Arg(name="b", value=str(i))],
            outputs=[Value(kind="int", text=text)],
        )
        for i, text in enumerate(["B", "T", "768"])
    ]
    module = ModuleResult(
        name="Net", line=1, status="traced",
        nodes=[NodeInfo(name="x", op="placeholder", target="x", outputs=[X]), size, *getitems],
    )  # fmt: skip
    hints = inlay_hints.shape_hints([module], source)
    assert [h.label for h in hints if h.line == 2] == ["▸ B=B, T=T, C=768"]
    found = hover.hover_text([module], lines, 2, 5, style="block")
    assert found is not None
    assert found.markdown.split("\n")[1] == "→ B=B, T=T, C=768"
    assert "unpacking x.size()" in found.markdown and "getitem_" not in found.markdown


def test_no_hint_for_devices_and_no_tensor_repr() -> None:
    device = NodeInfo(
        name="device", op="call_function", target="getattr", span=Span(2, 4, 2, 10),
        outputs=[Value(kind="device", text="meta")],
    )  # fmt: skip
    module = ModuleResult(name="Net", line=1, status="traced", nodes=[device])
    assert inlay_hints.shape_hints([module], "def f():\n    d = x.device\n") == []
    repr_value = Value(kind="other", text="tensor(..., device='meta', size=(2, 2, 16))")
    assert value_text(repr_value) == "[2, 2, 16]"


def test_code_lens_grammar_and_no_lens_on_classes_that_are_not_modules() -> None:
    one = ModuleResult(
        name="One", line=1, status="traced",
        nodes=[NodeInfo(name="x", op="placeholder", target="x", outputs=[X])],
    )  # fmt: skip
    assert "· 1 node ·" in code_lens.lens_title(one) + " ·"
    plain = ModuleResult(
        name="Config", line=3, status="skipped",
        notes=["`Config` is not an nn.Module subclass when the file runs"],
    )  # fmt: skip
    lenses = code_lens.lsp_code_lenses(
        [one, plain], [], ["a", "b", "c"], convert.UTF16, lambda n: n
    )
    assert len(lenses) == 1


@pytest.mark.parametrize(
    ("text", "op", "expected"),
    [
        ("xq_ * freqs_cis", "call_method", {"self": "xq_", "other": "freqs_cis"}),
        ("x.view(B, T, C)", "call_method", {"self": "x", "size": "B, T, C"}),
        ("view(B, T)", "call_method", {"size": "B, T"}),  # a chain split across lines
        ("F.conv2d(x, w, stride=2)", "call_function", {"input": "x", "weight": "w", "stride": "2"}),
    ],
)
def test_argument_expressions_as_written(text: str, op: str, expected: dict[str, str]) -> None:
    names = {
        "xq_ * freqs_cis": [("self", "positional_or_keyword"), ("other", "positional_or_keyword")],
        "x.view(B, T, C)": [("self", "positional_or_keyword"), ("size", "var_positional")],
        "view(B, T)": [("self", "positional_or_keyword"), ("size", "var_positional")],
        "F.conv2d(x, w, stride=2)": [
            ("input", "positional_or_keyword"),
            ("weight", "positional_or_keyword"),
            ("bias", "positional_or_keyword"),
            ("stride", "positional_or_keyword"),
        ],
    }[text]
    args = [Arg(name=n, value="v", kind=k, default=(n == "bias")) for n, k in names]
    target = {"xq_ * freqs_cis": "mul", "F.conv2d(x, w, stride=2)": "torch.conv2d"}.get(
        text, "view"
    )
    node = NodeInfo(name="n", op=op, target=target, args=args)  # type: ignore[arg-type]
    assert hover.argument_texts(node, hover.call_parts(text)) == expected
    # the call written there is another function's: a library's code made the node
    other = NodeInfo(name="n", op=op, target="torch.tensor", args=args)  # type: ignore[arg-type]
    assert hover.argument_texts(other, hover.call_parts(text)) == ({} if "(" in text else expected)


def test_an_element_is_named_by_its_subscript_only() -> None:
    """``getitem`` of a tuple has the texts of a subscript; at a call (where a fake run may
    place an element it could not place better) the call's arguments are not its own."""
    args = [Arg(name="a", value="size", node="size"), Arg(name="b", value="1")]
    node = NodeInfo(name="getitem", op="call_function", target="operator.getitem", args=args)
    assert hover.argument_texts(node, hover.call_parts("shape[-1]")) == {"a": "shape", "b": "-1"}
    assert hover.argument_texts(node, hover.call_parts("x.view(-1, shape[-1])")) == {}


def test_inlay_hints_unpacking_a_tuple_of_calls_and_a_shape() -> None:
    source = "def f(self, x):\n    a, b = self.p(x), self.q(x)\n    _b, t = x.shape\n"
    p = NodeInfo(
        name="p", op="call_module", target="p", span=Span(2, 11, 2, 20), outputs=[t("B", 8)]
    )
    q = NodeInfo(
        name="q", op="call_module", target="q", span=Span(2, 22, 2, 31), outputs=[t("B", 4)]
    )
    shape = NodeInfo(
        name="getattr_1", op="call_function", target="getattr", span=Span(3, 12, 3, 19),
        outputs=[Value(kind="size", shape=["B", "T"], text="[B, T]")],
    )  # fmt: skip
    item = NodeInfo(
        name="getitem", op="call_function", target="operator.getitem", span=Span(3, 12, 3, 19),
        args=[Arg(name="a", value="getattr_1", node="getattr_1")],
        outputs=[Value(kind="int", text="T")],
    )  # fmt: skip
    module = ModuleResult(name="Net", line=1, status="traced", nodes=[p, q, shape, item])
    labels = {h.line: h.label for h in inlay_hints.shape_hints([module], source)}
    assert labels == {2: "▸ a: [B, 8], b: [B, 4]", 3: "▸ _b=B, t=T"}


def test_an_unpacking_hint_names_the_values_made_on_its_line() -> None:
    # `inp, target = x, x[:, 1:]`: `inp` is `x` as it is (no node there), `target` is made
    # there. The line showed `▸ [B, T - 1] int64`, which could be either name's.
    source = "def f(self, x):\n    inp, target = x, x[:, 1:]\n"
    item = NodeInfo(
        name="getitem", op="call_function", target="operator.getitem", span=Span(2, 21, 2, 29),
        outputs=[Value(kind="tensor", shape=["B", "T - 1"], dtype="int64")], users=1,
    )  # fmt: skip
    module = ModuleResult(name="Net", line=1, status="traced", nodes=[item])
    labels = {h.line: h.label for h in inlay_hints.shape_hints([module], source)}
    assert labels == {2: "▸ target: [B, T - 1] int64"}, labels


def test_no_unpacking_hint_from_a_size_a_library_call_reads_inside() -> None:
    # `out, cache = self.net(x)` where `net` is a library's module run through: every node
    # it makes has the call's span, the first of them `x.shape`. That size was taken for
    # the value unpacked: `▸ out=B, cache=T` was shown for the logits and the cache.
    source = "def f(self, x):\n    out, cache = self.net(x)\n"
    call = Span(2, 17, 2, 28)
    shape = NodeInfo(
        name="getattr_1", op="call_function", target="getattr", span=call,
        outputs=[Value(kind="size", shape=["B", "T"], text="[B, T]")],
    )  # fmt: skip
    logits = NodeInfo(
        name="linear", op="call_module", target="net.to_logits", span=call,
        outputs=[t("B", "T", 256)],
    )  # fmt: skip
    module = ModuleResult(name="Net", line=1, status="traced", nodes=[shape, logits])
    labels = {h.line: h.label for h in inlay_hints.shape_hints([module], source)}
    assert labels == {2: "▸ [B, T, 256]"}, labels  # the value the call computes last


# -- one run of the code at a time -----------------------------------------------------------

BLOCK_SOURCE = textwrap.dedent(
    """\
    class Block(nn.Module):
        def forward(self, x):
            return x + self.conv(x)


    class Net(nn.Module):
        def forward(self, x):
            x = self.features(x)
            n = helper(x)
            return x
    """
)
BLOCK_LINES = BLOCK_SOURCE.split("\n")


def _residual(path: str, channels: int, size: int, read: str, number: int) -> list[NodeInfo]:
    """The nodes ``features.<i>`` makes for ``x + self.conv(x)``: two layers of its ``conv``
    (a container) and the sum."""
    shape = t("B", channels, size, size)
    conv_span, add_span = span_of_in(3, "self.conv(x)"), span_of_in(3, "x + self.conv(x)")
    site = span_of_in(8, "self.features(x)")
    conv = [
        NodeInfo(
            name=f"conv_{number}_{i}",
            op="call_module",
            target=f"{path}.conv.{i}",
            span=conv_span,
            call_site=site,
            outputs=[shape],
            module_path=f"{path}.conv",
            users=1,
            inputs=[read if i == 0 else f"conv_{number}_{i - 1}"],
        )
        for i in range(2)
    ]
    add = NodeInfo(
        name=f"add_{number}", op="call_function", target="operator.add", span=add_span,
        call_site=site, outputs=[shape], module_path=path, users=1,
        args=[Arg("a", read, node=read), Arg("b", f"conv_{number}_1", node=f"conv_{number}_1")],
        inputs=[read, f"conv_{number}_1"],
    )  # fmt: skip
    return [*conv, add]


def span_of_in(line: int, needle: str) -> Span:
    col = BLOCK_LINES[line - 1].index(needle)
    return Span(line, col, line, col + len(needle))


def _net() -> ModuleResult:
    x = NodeInfo(name="x", op="placeholder", target="x", outputs=[t("B", 8, 32, 32)], users=2)
    nodes = [
        x,
        *_residual("features.0", 8, 32, "x", 0),
        *_residual("features.2", 16, 16, "add_0", 1),
        *_residual("features.4", 24, 8, "add_1", 2),
    ]
    containers = ["features", "features.0.conv", "features.2.conv", "features.4.conv"]
    return ModuleResult(name="Net", line=6, status="traced", nodes=nodes, containers=containers)


def test_a_line_run_by_several_instances_shows_the_first_named() -> None:
    """The hover and the hint of ``x + self.conv(x)`` show ``features.0``'s values (its input
    and its output), name it and count the instances that differ: never the output of
    ``features.4`` over the input of ``features.0``."""
    net = _net()
    found = hover.hover_text([net], BLOCK_LINES, 3, BLOCK_LINES[2].index("x + ") + 1, style="block")
    assert found is not None
    shown = found.markdown.split("\n")
    assert shown[1:4] == [
        "→ [B, 8, 32, 32] float32",
        "operator.add",
        "features.0 · 1 of 3 instances · 2 others differ",
    ]
    (hint,) = [h for h in inlay_hints.shape_hints([net], BLOCK_SOURCE) if h.line == 3]
    assert hint.label == "▸ [B, 8, 32, 32] · features.0 · 1 of 3 instances · 2 others differ"
    assert hint.node == "add_0"


def test_the_class_captured_as_a_parents_instance_stands_for_it() -> None:
    """``Block`` captured as the instance ``Net`` built (``features.0``): its own run of the
    line is that instance's (the parent's run of ``features.0`` is not counted twice)."""
    net = _net()
    conv_site = span_of_in(3, "self.conv(x)")
    nodes = [NodeInfo(name="x", op="placeholder", target="x", outputs=[t("B", 8, 32, 32)], users=2)]
    for n in _residual("features.0", 8, 32, "x", 0):  # the same nodes, in Block's own paths
        nodes.append(
            NodeInfo(
                name=n.name,
                op=n.op,
                target=n.target.removeprefix("features.0."),
                span=n.span,
                call_site=n.span if n.op == "call_function" else conv_site,
                outputs=n.outputs,
                module_path=(n.module_path or "").removeprefix("features.0").lstrip("."),
                users=n.users,
                inputs=n.inputs,
                args=n.args,
            )
        )
    own = ModuleResult(
        name="Block",
        line=1,
        status="traced",
        containers=["conv"],
        constructed=Construction("parent", "Net.features.0", inputs_from="Net"),
        nodes=nodes,
    )
    (hint,) = [h for h in inlay_hints.shape_hints([own, net], BLOCK_SOURCE) if h.line == 3]
    assert hint.label == "▸ [B, 8, 32, 32] · Net.features.0 · 1 of 3 instances · 2 others differ"


def test_a_call_that_returns_nothing_it_computes_shows_no_result() -> None:
    """``helper(x)`` made one size (``x.shape[0]``) that nothing after it reads: the call
    returns a value made before it, and neither the hover nor the hint shows the size."""
    site = span_of_in(9, "helper(x)")
    size = NodeInfo(
        name="getitem", op="call_function", target="operator.getitem", span=Span(20, 4, 20, 14),
        call_site=site, outputs=[Value(kind="int", text="B")], users=0,
        args=[Arg("a", "x", node="x"), Arg("b", "0")], inputs=["x"],
    )  # fmt: skip
    x = NodeInfo(name="x", op="placeholder", target="x", outputs=[t("B", 8)], users=2)
    module = ModuleResult(name="Net", line=6, status="traced", nodes=[x, size])
    found = hover.hover_text([module], BLOCK_LINES, 9, site.col + 2, style="block")
    assert found is not None
    assert found.markdown.split("\n")[1] == f"→ {hover.NO_RESULT}"
    assert not [h for h in inlay_hints.shape_hints([module], BLOCK_SOURCE) if h.line == 9]


def test_values_that_hold_for_the_example_sizes_only_say_so() -> None:
    view = NodeInfo(
        name="view", op="call_method", target="view", span=span_of(12, "self.conv1(x)"),
        call_site=span_of(12, "self.conv1(x)"), outputs=[t(2, 4, 2)], users=1,
    )  # fmt: skip
    output = NodeInfo(name="output", op="output", target="output", outputs=[t(2, 4, 2)])
    module = ModuleResult(
        name="Net", line=5, status="traced", nodes=[view, output],
        inputs=[InputValue("x", t("B", 16))],
        outputs=[t(2, 4, 2)], example_nodes=["view", "output"], example_sizes={"B": 2},
    )  # fmt: skip
    (hint,) = inlay_hints.shape_hints([module], SOURCE)
    assert hint.label == "▸ [2, 4, 2] · holds for B = 2"
    found = hover.hover_text([module], LINES, 12, LINES[11].index("conv1") + 1)
    assert found is not None and "*output holds for B = 2 only*" in found.markdown
    assert "[B, 16] → [2, 4, 2] (holds for B = 2)" in code_lens.lens_title(module)
    # a value that reads one of them: its input row holds for B = 2 only, and says so
    total = NodeInfo(
        name="sum", op="call_method", target="sum", span=span_of(13, "F.conv2d(x, w, stride=2)"),
        args=[Arg("self", "view", node="view")], outputs=[t()], inputs=["view"], users=1,
    )  # fmt: skip
    module.nodes.insert(1, total)
    found = hover.hover_text([module], LINES, 13, LINES[12].index("conv2d") + 1)
    assert found is not None and "*some values shown hold for B = 2 only*" in found.markdown


def test_a_call_made_twice_by_a_library_is_one_run_a_loop_is_two() -> None:
    """``k, v = cache.update(k, v)``: the cache's code makes ``torch.tensor([])`` twice, then
    concatenates each (all at that line): one run, whose value is a concatenation, not the
    empty tensor. ``h = h + self.fc(x)`` twice in a loop: two runs."""
    source = "def f(self, k, v, x, h):\n    k, v = cache.update(k, v)\n    h = h + self.fc(x)\n"
    at = Span(2, 11, 2, 29)
    empty = Value(kind="tensor", shape=[0], dtype="torch.float32")

    nodes = [
        made("tensor", "torch.tensor", at, empty),
        made("tensor_1", "torch.tensor", at, empty),
        made("cat", "torch.cat", at, t("B", 8, "T", 64), ("tensor", "k")),
        made("cat_1", "torch.cat", at, t("B", 8, "T", 64), ("tensor_1", "v")),
    ]
    line = Span(3, 8, 3, 22)
    fc_span = Span(3, 12, 3, 22)
    nodes += [
        made("fc", "fc", fc_span, t("B", 8), ("x",)),
        made("add", "operator.add", line, t("B", 8), ("h", "fc")),
        made("fc_1", "fc", fc_span, t("B", 8), ("x",)),
        made("add_1", "operator.add", line, t("B", 8), ("add", "fc_1")),
    ]
    module = ModuleResult(name="Net", line=1, status="traced", nodes=nodes)
    labels = {h.line: h.label for h in inlay_hints.shape_hints([module], source)}
    assert labels[2] == "▸ [B, 8, T, 64]"
    assert labels[3].startswith("▸ [B, 8]")
    shown = hover.hover_text([module], source.split("\n"), 3, 13)
    assert shown is not None and "×2" in shown.markdown, shown


def test_a_library_model_reading_a_shape_in_two_of_its_submodules_is_one_run() -> None:
    """``logits = self.net(x)`` where ``net`` is a library's model run through: every node it
    makes has the call's span; its positional embedding reads ``x.shape``, then its layers
    read the shape of the embeddings. The second read was taken for a second run of the
    line (a loop), and the hover said "1 of 2 runs · 1 other differs" for one call."""
    source = "def f(self, x):\n    logits = self.net(x)\n"
    at = Span(2, 13, 2, 24)
    size = Value(kind="size", shape=["B", "T"], text="[B, T]")
    read = made("getattr", "getattr", at, size, ("x",))
    read.module_path = "net.pos_emb"
    emb = made("emb", "torch.embedding", at, t("B", "T", 64), ("x",))
    emb.module_path = "net.token_emb"
    again = made("getattr_1", "getattr", at, size, ("emb",))
    again.module_path = "net.layers"
    head = made("linear", "torch.nn.functional.linear", at, t("B", "T", 256), ("emb",))
    head.module_path = "net.to_logits"
    module = ModuleResult(
        name="Net", line=1, status="traced", nodes=[read, emb, again, head],
        containers=["net", "net.pos_emb", "net.token_emb", "net.layers", "net.to_logits"],
    )  # fmt: skip
    shown = hover.hover_text([module], source.split("\n"), 2, 18)
    assert shown is not None and "runs" not in shown.markdown, shown
    labels = {h.line: h.label for h in inlay_hints.shape_hints([module], source)}
    assert labels == {2: "▸ [B, T, 256]"}, labels


def test_no_hint_names_none_or_an_unused_size() -> None:
    """``return Output(states=out.hidden_states)``: the ``None`` the layer's output holds is
    not the statement's value; ``mask = make_mask(x)``, whose library code read ``x.shape``
    and left it unused: no hint either. An unused tensor still gets one (FX302's line)."""
    source = (
        "def f(self, x):\n"
        "    return Output(states=x.states)\n"
        "    mask = make_mask(x)\n"
        "    x.mul(2)\n"
    )
    at = Span(2, 4, 2, 34)
    none = made("getattr_1", "getattr", at, Value(kind="none", text="None"))
    cache = made("getattr_3", "getattr", at, Value(kind="other", text="DynamicCache"))
    read = Span(3, 11, 3, 23)
    shape = Value(kind="size", shape=["B", 8], text="[B, 8]")
    size = made("getattr_2", "getattr", read, shape, users=0)
    item = made("getitem", "operator.getitem", read, Value(kind="int", text="B"), ("getattr_2",), 0)
    mul = made("mul", "mul", Span(4, 4, 4, 12), t("B", 8), users=0)
    nodes = [none, cache, size, item, mul]
    module = ModuleResult(name="Net", line=1, status="traced", nodes=nodes)
    labels = {h.line: h.label for h in inlay_hints.shape_hints([module], source)}
    assert labels == {4: "▸ [B, 8]"}


def test_a_comprehension_line_is_hinted_with_what_it_makes_of_its_calls() -> None:
    """``y = torch.stack([self.fc(x) for _ in range(3)])``: the three calls are one run of
    the line (``stack`` reads them all), whose value is the stack, not one call's ``[B, 8]``;
    the hover on ``self.fc(x)`` still shows the call ×3."""
    source = "def f(self, x):\n    y = torch.stack([self.fc(x) for _ in range(3)])\n"
    call, whole = Span(2, 21, 2, 31), Span(2, 8, 2, 51)
    nodes = [made(f"fc_{i}", "fc", call, t("B", 8), ("x",)) for i in range(3)]
    nodes.append(made("stack", "torch.stack", whole, t(3, "B", 8), ("fc_0", "fc_1", "fc_2")))
    module = ModuleResult(name="Net", line=1, status="traced", nodes=nodes)
    labels = {h.line: h.label for h in inlay_hints.shape_hints([module], source)}
    assert labels == {2: "▸ [3, B, 8]"}
    shown = hover.hover_text([module], source.split("\n"), 2, 24)
    assert shown is not None and "×3" in shown.markdown, shown


_AT = Span(2, 24, 2, 51)
_STATES = Value(kind="tensor", shape=["B", 64, 8, 8], dtype="float32")
_EMB = Value(kind="tensor", shape=["B", 64], dtype="float32")


def _call(name: str, target: str, path: str, *inputs: str, value: Value = _STATES) -> NodeInfo:
    """A node at ``_AT`` (a module call when the target is a path of ``resnets`` or ``h``)."""
    op = "call_module" if target.startswith(("resnets", "h.")) else "call_function"
    args = [Arg(name=f"in{i}", value=x, node=x) for i, x in enumerate(inputs)]
    node = NodeInfo(name, op, target, span=_AT, call_site=_AT, args=args, outputs=[value])
    node.module_path, node.inputs = path, list(inputs)
    if op == "call_module":
        node.module_type = "Layer()"
    return node


def _library_block() -> tuple[ModuleResult, list[str]]:
    """``hidden_states = resnet(hidden_states, temb)`` where ``resnet`` is a block of another
    file traced through (diffusers' ``ResnetBlock2D`` with an ``AdaGroupNorm``): every node of
    the block is at that call, and the block's first layer reads ``temb``."""
    lines = ["", "        hidden_states = resnet(hidden_states, temb)"]
    call = _call

    nodes = [
        NodeInfo("hidden_states", "placeholder", "hidden_states", outputs=[_STATES]),
        NodeInfo("temb", "placeholder", "temb", outputs=[_EMB]),
        call("linear", "resnets.0.norm1.linear", "resnets.0.norm1", "temb", value=_EMB),
        call("group_norm", "torch.group_norm", "resnets.0.norm1", "hidden_states"),
        call("mul", "operator.mul", "resnets.0.norm1", "group_norm", "linear"),
        call("act", "resnets.0.act", "resnets.0", "mul"),
        call("conv1", "resnets.0.conv1", "resnets.0", "act"),
        call("act_1", "resnets.0.act", "resnets.0", "conv1"),
        call("blocks_1", "resnets.0.blocks.1", "resnets.0", "act_1"),
        call("blocks_2", "resnets.0.blocks.2", "resnets.0", "blocks_1"),
    ]
    module = ModuleResult(name="Down", line=1, status="traced", nodes=nodes)
    return module, lines


def test_a_layer_inside_a_block_called_at_its_span_takes_no_text_from_that_call() -> None:
    module, lines = _library_block()
    nodes = {n.name: n for n in module.nodes}
    # every layer of the block reads something else than the call's arguments as written:
    # the first reads `temb`, the others what the block made before them
    inner = render.inner_module_calls(module.nodes)
    assert inner == {"linear", "act", "conv1", "act_1", "blocks_1", "blocks_2"}
    texts = [render.call_text(nodes[n], lines, nodes, inner) for n in ("linear", "conv1", "mul")]
    assert texts == [
        "Layer(in0=temb)",
        "Layer(in0=Layer(…))",
        "mul(in0=group_norm(…), in1=Layer(…))",
    ]
    # without knowing, the call's texts were taken: the first layer read `hidden_states`
    assert render.call_text(nodes["linear"], lines, nodes) == "Layer(in0=hidden_states)"
    # a layer written at its own span, and a loop of them, keep the text of their call
    own = [_call("h_0", "h.0", "", "hidden_states"), _call("h_1", "h.1", "", "h_0")]
    own.append(_call("getitem", "operator.getitem", "", "h_1"))
    assert render.inner_module_calls([nodes["hidden_states"], *own]) == set()


def _block_call_inputs(line: str) -> list[tuple[str, str, str]]:
    """The input rows of the hover of the ``resnet(...)`` call written as ``line`` (the
    second line of the document), over the nodes of :func:`_library_block`."""
    module, _ = _library_block()
    calls = [n for n in module.nodes if n.op != "placeholder"]
    start = line.index("resnet(")
    view = hover.group_view(calls, module, ["", line], Span(2, start, 2, len(line)))
    return [row for row in view.rows if row[0] == "input"]


def test_a_block_call_pairs_its_arguments_with_the_values_they_name() -> None:
    """The hover of ``resnet(hidden_states, temb)``: ``hidden_states`` is the states, even
    though the block reads ``temb`` first."""
    assert _block_call_inputs("        hidden_states = resnet(hidden_states, temb)") == [
        ("input", "hidden_states", "[B, 64, 8, 8] float32"),
        ("input", "temb", "[B, 64] float32"),
    ]


def test_a_block_call_names_its_keyword_arguments_and_gives_none_no_value() -> None:
    """``resnet(hidden_states, emb=temb, mask=None)``: each keyword row is labelled with the
    parameter it sets, and ``None`` takes no value entering the block (it read "input None"
    with no name, and a literal could take a value left over)."""
    line = "        hidden_states = resnet(hidden_states, mask=None, emb=temb)"
    assert _block_call_inputs(line) == [
        ("input", "hidden_states", "[B, 64, 8, 8] float32"),
        ("input", "mask=None", ""),
        ("input", "emb=temb", "[B, 64] float32"),
    ]


def test_runs_of_one_instance_are_told_apart_by_call_site_with_no_empty_label() -> None:
    """Three runs of one module's code, from two captured classes (so each label starts with
    the class), two of them in one class: one with a call site there and one without. The
    label of the one without names the instance alone ("…experts, ·" was shown before: an
    empty call site after a comma)."""
    node = made("a", "relu", Span(1, 0, 1, 4), t("B", 8))
    one = ModuleResult(name="Parent", line=1, status="traced", nodes=[node])
    other = ModuleResult(name="Other", line=5, status="traced", nodes=[node])
    runs = [
        render.Run([node], "experts", Span(3, 4, 3, 20), module=one),
        render.Run([node], "experts", None, module=one),
        render.Run([node], "experts", None, module=other),
    ]
    render.label_runs(runs)
    labels = [r.label for r in runs]
    assert all(label and not label.rstrip().endswith(",") for label in labels), labels
    assert len(set(labels)) == 3, labels


def test_a_call_passing_star_args_lists_the_values_they_carry_by_name() -> None:
    """``return self.decoder(*args, **kwargs)`` (transformers' ``WhisperDecoderWrapper``): the
    hover listed one input, ``*args``, with no shape. It lists what the call passes: each value
    entering the decoder, by its name, with its shape."""
    lines = ["", "        return self.decoder(*args, **kwargs)"]
    at = Span(2, 15, 2, 44)
    ids = Value(kind="tensor", shape=["B", "T"], dtype="int64")
    mask = Value(kind="tensor", shape=["B", "T"], dtype="int64")
    embed = NodeInfo("embed", "call_module", "decoder.embed_tokens", span=at, call_site=at)
    embed.module_path, embed.inputs, embed.outputs = (
        "decoder.embed_tokens",
        ["input_ids"],
        [_STATES],
    )
    mul = NodeInfo("mul", "call_function", "operator.mul", span=at, call_site=at)
    mul.module_path, mul.inputs, mul.outputs = "decoder", ["embed", "attention_mask"], [_STATES]
    # the wrapper's parameters are placed at the call (fxls traces it through a subclass
    # whose forward takes the decoder's parameters), so they are among the call's nodes
    placed = NodeInfo("input_ids", "placeholder", "input_ids", span=at, outputs=[ids])
    nodes = [
        placed,
        NodeInfo("attention_mask", "placeholder", "attention_mask", outputs=[mask]),
        embed,
        mul,
    ]
    module = ModuleResult(name="Wrapper", line=1, status="traced", nodes=nodes)
    view = hover.group_view([placed, embed, mul], module, lines, at)
    inputs = [row for row in view.rows if row[0] == "input"]
    assert inputs == [
        ("input", "input_ids", "[B, T] int64"),
        ("input", "attention_mask", "[B, T] int64"),
    ], view.rows


def test_a_build_with_fewer_layers_shows_the_default_configurations_parameters() -> None:
    """A library class built from its default configuration with 2 layers per stack: its code
    lens gives the parameters of the default (a 2-layer Llama-7B showed "536 M params"), the
    class hover both counts, the `fxls check` line both."""
    from dataclasses import replace

    from fxls.cli.report.text import format_text
    from fxls.engine.analyze import FileAnalysis

    shorter = replace(MODULE, params=535_842_816, default_params=6_738_415_616)
    assert "6.7 B params" in code_lens.lens_title(shorter), code_lens.lens_title(shorter)
    found = [v for k, v in hover.class_summary(shorter).rows if k == "parameters"]
    assert found == [
        "6.7 B (6,738,415,616) in the default configuration",
        "535.8 M (535,842,816) as built, with fewer layers",
    ], found
    text = format_text(FileAnalysis(path="m.py", version=None, modules=[shorter]))
    assert "6.7 B params (535.8 M params as built)" in text, text
