"""The `# fxls:` directive grammar and the CLI parsers built on it (pure, no worker)."""

from __future__ import annotations

import textwrap

import pytest

from fxls.analysis import DirectiveError, parse, parse_directive, parse_init, parse_input_spec
from fxls.protocol.model import DimSpec, Span


def test_shape_with_symbols_sizes_and_fixed_dims() -> None:
    d = parse_directive("x = (B=2, 3, 224, 224)")
    assert d.kind == "input"
    assert d.input is not None
    assert d.input.name == "x"
    assert d.input.kind == "shape"
    assert d.input.dims == [
        DimSpec("B", 2),
        DimSpec(None, 3),
        DimSpec(None, 224),
        DimSpec(None, 224),
    ]
    assert d.input.dtype is None


@pytest.mark.parametrize(
    ("text", "dtype"),
    [
        ("tokens = (B, T) int64", "int64"),
        ("tokens = (B, T) long", "int64"),
        ("tokens = (B, T) torch.int64", "int64"),
        ("h = (B, T, 64) float16", "float16"),
        ("h = (B, T, 64) half", "float16"),
        ("h = (B, T, 64) bfloat16", "bfloat16"),
        ("m = (B, T) bool", "bool"),
        ("m = (B, T) bool  # padding mask", "bool"),
    ],
)
def test_dtype_after_shape(text: str, dtype: str) -> None:
    d = parse_directive(text)
    assert d.input is not None and d.input.kind == "shape"
    assert d.input.dims == [DimSpec("B", None), DimSpec("T", None)] or len(d.input.dims) == 3
    assert d.input.dtype == dtype


@pytest.mark.parametrize(
    ("text", "dims"),
    [
        ("t = (T,)", [DimSpec("T", None)]),
        ("t = (T)", [DimSpec("T", None)]),
        ("t = (7)", [DimSpec(None, 7)]),
        ("t = ()", []),
        ("t = ( B = 4 ,T=8 )", [DimSpec("B", 4), DimSpec("T", 8)]),
    ],
)
def test_single_dim_and_spacing(text: str, dims: list[DimSpec]) -> None:
    d = parse_directive(text)
    assert d.input is not None and d.input.kind == "shape"
    assert d.input.dims == dims


@pytest.mark.parametrize(
    "rhs",
    [
        "None",
        "True",
        "(torch.zeros(2, 2, 16), torch.zeros(2, 2, 16))",
        "torch.randint(0, 100, (2, 16))",
        "(a + 1, 2)",
        "make_mask(16)  # a helper of this file",
    ],
)
def test_other_right_hand_sides_are_expressions(rhs: str) -> None:
    d = parse_directive(f"arg = {rhs}")
    assert d.input is not None
    assert d.input.kind == "expr"
    assert d.input.expr == rhs
    assert d.input.dims == []


def test_init_keeps_argument_text() -> None:
    d = parse_directive("init(config=GPTConfig(n_layer=2, n_embd=64))")
    assert d.kind == "init"
    assert d.init == "config=GPTConfig(n_layer=2, n_embd=64)"
    assert parse_directive("init()").init == ""
    assert parse_directive("init(3, 'a)b')  # note").init == "3, 'a)b'"


def test_leaf_and_skip() -> None:
    assert parse_directive("leaf Attention").leaf == ["Attention"]
    assert parse_directive("leaf Attention, nn.MultiheadAttention").leaf == [
        "Attention",
        "MultiheadAttention",
    ]
    assert parse_directive("skip").kind == "skip"
    assert parse_directive("skip  # too slow").kind == "skip"


def test_names_that_look_like_keywords_are_inputs() -> None:
    for name in ("leaf", "skip", "init"):
        d = parse_directive(f"{name} = (B, 4)")
        assert d.kind == "input"
        assert d.input is not None and d.input.name == name


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty directive"),
        ("x = (B=2, 3", "neither a shape"),
        ("x = (B=-1, 3)", "cannot be negative"),
        ("x = (B, 3) int65", "unknown dtype `int65`"),
        ("x = (B, 3.5)", "not a dimension"),
        ("x = ", "needs a shape"),
        ("x = 1 +", "not a Python expression"),
        ("init(a=)", "init(ARGS)"),
        ("init(a)(b)", "nothing after it"),
        ("leaf", "needs a class name"),
        ("leaf 3x", "not a class name"),
        ("trace everything", "is not a directive"),
    ],
)
def test_bad_directives_say_what_was_expected(text: str, needle: str) -> None:
    with pytest.raises(DirectiveError) as info:
        parse_directive(text)
    assert needle in str(info.value)


def test_cli_parsers_share_the_grammar() -> None:
    spec = parse_input_spec("x=(B, 3, 224, 224)")
    assert spec.source == "cli"
    assert spec.dims[0] == DimSpec("B", None)
    assert parse_input_spec("tokens=(B=2, T=16) int64").dtype == "int64"
    assert parse_input_spec("mask=None").kind == "expr"
    assert parse_init("n_layer=2, d=64") == "n_layer=2, d=64"
    assert parse_init("init(n_layer=2)") == "n_layer=2"
    assert parse_init("Config(2)") == "Config(2)"
    with pytest.raises(DirectiveError):
        parse_input_spec("x")
    with pytest.raises(DirectiveError):
        parse_input_spec("x=(B,")
    with pytest.raises(DirectiveError):
        parse_init("a=")


# --- directives in a document ------------------------------------------------------------


def _doc(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def test_directives_above_decorators_and_at_body_start() -> None:
    result = parse(
        _doc(
            '''
            from torch import nn

            # fxls: init(width=8)
            # A comment that is not a directive is fine in between.
            @register
            # fxls: x = (B=2, 8)
            @other(
                1,
            )
            class Net(nn.Module):
                """Docstring."""
                # fxls: mask = None
                # fxls: leaf Inner
                def forward(self, x, mask=None):
                    return x
            '''
        )
    )
    assert result.diagnostics == []
    (net,) = result.classes
    assert net.directives.init == "width=8"
    assert net.directives.init_line == 3
    assert net.directives.leaf == ["Inner"]
    names = [s.name for s in net.inputs]
    assert names == ["x", "mask"]
    request = net.request()
    assert request.init == "width=8" and request.init_line == 3
    assert [s.kind for s in request.inputs] == ["shape", "expr"]
    assert request.inputs[0].line == 6
    assert request.skip is False


def test_blank_line_detaches_a_directive() -> None:
    text = _doc(
        """
        from torch import nn
        # fxls: skip

        class Net(nn.Module):
            def forward(self, x):
                return x
        """
    )
    result = parse(text)
    assert result.classes[0].directives.skip is False
    (diag,) = result.diagnostics
    assert diag.code == "FX403"
    assert diag.span == Span(2, 0, 2, len("# fxls: skip"))
    assert "not attached" in diag.message


def test_bad_directive_reports_fx403_on_its_line_and_keeps_the_others() -> None:
    text = _doc(
        """
        from torch import nn

        # fxls: x = (B=2, 3
        # fxls: skip
        class Net(nn.Module):
            def forward(self, x):
                return x
        """
    )
    result = parse(text)
    (diag,) = result.diagnostics
    assert diag.code == "FX403"
    assert diag.severity == "error"
    assert diag.span == Span(3, 0, 3, len("# fxls: x = (B=2, 3"))
    assert "shape" in diag.message
    assert result.classes[0].directives.skip is True


def test_directive_for_unknown_parameter_and_duplicates() -> None:
    text = _doc(
        """
        from torch import nn

        # fxls: init(a=1)
        # fxls: init(a=2)
        # fxls: y = (B, 3)
        # fxls: x = (B, 3)
        # fxls: x = (B, 4)
        class Net(nn.Module):
            def forward(self, x):
                return x

        # fxls: anything = (B, 3)
        class Kw(nn.Module):
            def forward(self, **kwargs):
                return kwargs
        """
    )
    result = parse(text)
    messages = {d.span.line: d.message for d in result.diagnostics}
    assert sorted(messages) == [4, 5, 7]
    assert "given twice" in messages[4]
    assert "has no parameter `y`" in messages[5]
    assert "declared twice" in messages[7]
    net, kw = result.classes
    assert net.directives.init == "a=1"
    assert [s.dims[1].size for s in net.inputs] == [3]
    assert [s.name for s in kw.inputs] == ["anything"]


def test_directive_in_a_string_is_not_a_directive() -> None:
    text = _doc(
        '''
        """Usage:

        # fxls: x = (B, 3)
        """
        from torch import nn

        class Net(nn.Module):
            def forward(self, x):
                return x
        '''
    )
    result = parse(text)
    assert result.diagnostics == []
    assert result.classes[0].inputs == []


def test_directives_win_over_jaxtyping_annotations() -> None:
    text = _doc(
        """
        from jaxtyping import Float
        from torch import Tensor, nn

        # fxls: x = (N=4, 3) float64
        class Net(nn.Module):
            def forward(self, x: Float[Tensor, "batch 3"], y: Float[Tensor, "batch 5"]):
                return x
        """
    )
    (net,) = parse(text).classes
    x, y = net.inputs
    assert (x.source, x.dims[0], x.dtype) == ("directive", DimSpec("N", 4), "float64")
    assert (y.source, y.dims[0]) == ("annotation", DimSpec("batch", None))


def test_long_whitespace_runs_parse_in_linear_time() -> None:
    """A quadratic regular expression over a 100,000-space dimension froze the server."""
    import time

    started = time.perf_counter()
    with pytest.raises(DirectiveError):
        parse_input_spec("x = (a=" + " " * 100_000 + "!)")
    spec = parse_input_spec("x = (B=2, " + " " * 100_000 + "T)")
    assert [d.name for d in spec.dims] == ["B", "T"]
    assert time.perf_counter() - started < 1.0


def test_pass_directive_marks_a_function_for_the_classes_it_names() -> None:
    text = textwrap.dedent(
        """\
        import torch
        from torch import nn


        class A(nn.Module):
            def forward(self, x):
                return x


        class B(nn.Module):
            def forward(self, x):
                return x


        # fxls: pass A, B
        # a comment between is fine
        @some.decorator
        def fuse(gm):
            return gm


        # fxls: pass Missing
        def other(gm):
            return gm
        """
    )
    parsed = parse(text)
    assert parse_directive("pass A, B").classes == ["A", "B"]
    (fuse, other) = parsed.passes
    assert (fuse.function, fuse.line, fuse.classes) == ("fuse", 18, ["A", "B"])
    assert fuse.name_span == Span(18, 4, 18, 8)
    assert other.classes == []
    requests = {c.name: c.request() for c in parsed.classes}
    assert [(p.function, p.line) for p in requests["A"].passes] == [("fuse", 18)]
    assert [(p.function, p.line) for p in requests["B"].passes] == [("fuse", 18)]
    (diag,) = parsed.diagnostics
    assert diag.code == "FX403" and diag.span.line == 22
    assert "no module class `Missing`" in diag.message


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("# fxls: pass Net\nclass Net(nn.Module):\n    pass\n", "marks a function, not a class"),
        ("class Net(nn.Module):\n    pass\n\n\n# fxls: pass\ndef f(gm):\n    return gm\n",
         "`pass` needs a class name"),
        ("class Net(nn.Module):\n    pass\n\n\n# fxls: pass Net\nasync def f(gm):\n    return gm\n",
         "is `async`"),
        ("class Net(nn.Module):\n    pass\n\n\n# fxls: pass Net\n\ndef f(gm):\n    return gm\n",
         "not attached"),
        ("class Net(nn.Module):\n    pass\n\n\n# fxls: pass m.Net\ndef f(gm):\n    return gm\n",
         "without a module prefix"),
    ],
)  # fmt: skip
def test_misplaced_or_invalid_pass_directives_are_fx403(source: str, needle: str) -> None:
    parsed = parse("from torch import nn\n" + source)
    assert [d.code for d in parsed.diagnostics] == ["FX403"], parsed.diagnostics
    assert needle in parsed.diagnostics[0].message
    assert all(not c.passes for c in parsed.classes)
