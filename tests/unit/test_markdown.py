"""Worker strings in hovers: rendered with a CommonMark renderer (GFM tables on), no string a
model can choose becomes a link, an image or HTML, and rendering stays linear."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from fxls.lsp.features import hover
from fxls.lsp.features import markdown as md
from fxls.protocol.model import (
    Arg,
    ErrorInfo,
    InputValue,
    ModuleResult,
    NodeInfo,
    Span,
    Strategy,
    Value,
)

RENDERER = MarkdownIt("commonmark").enable(["table", "strikethrough"])
"""``html`` is on in the commonmark preset: raw HTML that got through would be kept."""

HOSTILE = [
    "![x](https://h/?d=s)",
    "<img src=https://h/i onerror=alert(1)>",
    "[a](javascript:alert(1))",
    "<https://h/autolink>",
    "<a href='https://h'>x</a>",
    "`",
    "``",
    "` ![x](https://h/1) `",
    "```\n![x](https://h/2)\n```",
    "x`![x](https://h/3)`y",
    "`" * 40 + "![x](https://h/4)",
    "__init__",
    "_a_ *b* **c**",
    "a|![x](https://h/5)|b",
    "a\\|![x](https://h/6)",
    "a\n\n![x](https://h/7)",
    "a\r![x](https://h/8)",
    "a\u2028![x](https://h/9)",
    "&lt;img src=x&gt;",
    "[x]: https://h/ref\n\n[x]",
    "\\`![x](https://h/10)\\`",
    " ` ",
    "   ",
    "www.h.example/x https://h/bare",
]
FORBIDDEN = {"link_open", "image", "html_inline", "html_block"}


def _tokens(markdown: str) -> list[str]:
    out: list[str] = []
    for token in RENDERER.parse(markdown):
        out.append(token.type)
        out.extend(child.type for child in token.children or [])
    return out


def assert_inert(markdown: str) -> None:
    html = RENDERER.render(markdown)
    assert not FORBIDDEN & set(_tokens(markdown)), (markdown, html)
    for tag in ("<img", "<a ", "<a>", "<script", "<iframe"):
        assert tag not in html, (markdown, html)


@pytest.mark.parametrize("text", HOSTILE)
def test_code_span_keeps_the_text_and_makes_nothing_of_it(text: str) -> None:
    span = md.code(text)
    assert_inert(f"before {span} after")
    html = RENDERER.render(span)
    expected = md.one_line(text)
    # the renderer shows exactly the text (HTML-escaped) inside <code>
    assert html.count("<code>") == 1
    shown = html.split("<code>", 1)[1].rsplit("</code>", 1)[0]
    unescaped = shown.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
    assert unescaped.replace("&amp;", "&") == expected


@pytest.mark.parametrize("text", HOSTILE)
def test_table_cells_hold_any_text(text: str) -> None:
    table = "| a | b |\n| --- | --- |\n" + f"| {md.cell(text, 10_000)} | {md.word(text)} |"
    assert_inert(table)
    html = RENDERER.render(table)
    assert html.count("<td>") == 2, html  # no extra cell from a `|` in the text


def test_words_stay_plain_everything_else_is_code() -> None:
    assert md.word("call_module") == "call_module"
    assert md.word("float32") == "float32"
    assert md.word("__init__") == "`__init__`"
    assert md.word("a.b") == "`a.b`"
    assert md.word("") == ""
    assert md.code("a`b") == "``a`b``"
    assert md.code("`a") == "`` `a ``"
    assert md.code(" a ") == "` a `" or md.code(" a ") == "`  a  `"


def test_values_are_clipped_with_an_ellipsis() -> None:
    long = "x" * 10_000
    assert md.clip(long) == "x" * (md.MAX_VALUE - 1) + md.ELLIPSIS
    assert len(md.plain(long, md.MAX_LABEL)) == md.MAX_LABEL
    assert md.code(long).count("x") == md.MAX_VALUE - 1


def test_join_blocks_drops_whole_blocks() -> None:
    blocks = [md.code("`" * 30 + str(i)) for i in range(100)]
    joined = md.join_blocks(blocks, "\n\n", 500)
    assert len(joined) <= 500 + 20
    assert joined.endswith("more*")
    assert_inert(joined)


def _hostile_module(text: str) -> ModuleResult:
    value = Value(kind="tensor", shape=["B", text], dtype=text)
    node = NodeInfo(
        name=text,
        op=text,
        target=text,
        span=Span(3, 0, 3, 10),
        call_site=Span(3, 0, 3, 10),
        args=[
            Arg(name=text, value=text, node=text),
            Arg(name="b", value=text, default=True, kind="var_keyword"),
        ],
        signature="approximate",
        outputs=[value, Value(kind="str", text=text)],
        module_type=text,
        module_path=text,
    )
    placeholder = NodeInfo(name=text, op="placeholder", target=text, outputs=[value])
    return ModuleResult(
        name=text,
        line=1,
        status="partial",
        strategy=Strategy(text, [text]),  # the codec refuses it; the views escape it anyway
        build=text,
        inputs=[InputValue(text, value, assumed=True, origin="assumed")],
        outputs=[value],
        nodes=[placeholder, node, node],
        error=ErrorInfo(kind=text, phase="trace", type=text, message=text),
    )


def _hovers(module: ModuleResult) -> list[str]:
    """Every hover form, in both styles, with the hostile text in the worker's strings and in
    the document (argument expressions are read from the source)."""
    text = module.name
    lines = [f"class {module.name}:", "    pass", "0123456789", f"    {text[:2000]}"]
    node = module.nodes[1]
    span = Span(3, 0, 3, 5)
    source = Span(4, 0, 4, len(lines[3]))
    from fxls.protocol.model import Construction

    module.constructed = Construction(
        source="assumed", text=text, assumed={text: text}, pin=text, inputs_from=text
    )
    module.notes = [text]
    out: list[str] = []
    for style in ("table", "block"):
        views = [
            hover.node_view(node, module, lines, source),
            hover.group_view([node, module.nodes[0]], module, lines, source),
            hover.call_view([node, node], module, lines, span),
        ]
        out += [hover.render_view(view, style) for view in views]
        out.append(hover.class_markdown(module, isolation=[module.name], style=style))
        found = hover.hover_text([module], lines, 3, 2, style=style)
        out.append(found.markdown if found else "")
    return out


@pytest.mark.parametrize("text", HOSTILE)
def test_every_hover_of_a_hostile_result_is_inert(text: str) -> None:
    for markdown in _hovers(_hostile_module(text)):
        assert_inert(markdown)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("`![]()<>|\\_*&#:/ \nahx.=;'\"")), max_size=60))
def test_random_punctuation_never_makes_markup(text: str) -> None:
    for markdown in _hovers(_hostile_module(text)):
        assert_inert(markdown)


def test_long_backtick_runs_render_in_linear_time() -> None:
    """The old code-span regex took 13 s on 12,000 backticks; a one-pass scanner does not."""
    for text in ("`" * 200_000, "` " * 100_000, "``x" * 60_000, "[" * 200_000):
        module = _hostile_module(text)
        started = time.perf_counter()
        markdowns = _hovers(module)
        elapsed = time.perf_counter() - started
        assert elapsed < 1.0, elapsed
        assert all(len(m) <= md.MAX_MARKDOWN + 200 for m in markdowns)
