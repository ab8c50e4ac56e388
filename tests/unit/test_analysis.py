"""The AST pass: module classes, spans, forward parameters, jaxtyping, syntax errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fxls.analysis import find_classes, parse
from fxls.protocol.model import DimSpec, Span

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _doc(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def test_candidate_classes_and_obvious_non_modules() -> None:
    text = _doc(
        """
        import enum
        import torch
        from dataclasses import dataclass
        from torch import nn
        from somewhere import Base, make_base

        @dataclass
        class Config:
            n: int = 2

        class Color(enum.Enum):
            RED = 1

        class MyError(Exception):
            pass

        class A(nn.Module): ...
        class B(torch.nn.Module): ...
        class C(nn.Sequential): ...
        class D(A): ...
        class E(Base): ...
        class F(make_base()): ...
        class G(Config): ...
        class H(nn.ModuleList, metaclass=type): ...
        class I(Generic[T], nn.Module): ...
        if True:
            class J(nn.Module): ...

        def factory():
            class Hidden(nn.Module): ...
            return Hidden
        """
    )
    classes = {c.name: c for c in find_classes(text)}
    assert sorted(classes) == ["A", "B", "C", "D", "E", "F", "H", "I", "J"]
    assert classes["D"].certain and classes["A"].certain and classes["I"].certain
    assert not classes["E"].certain and not classes["F"].certain


def test_local_class_chain_resolves_in_any_order() -> None:
    text = _doc(
        """
        class Child(Parent): ...
        class Parent(Grand): ...
        class Grand(object): ...
        class M2(M1): ...
        class M1(nn.Module): ...
        """
    )
    assert [c.name for c in find_classes(text)] == ["M2", "M1"]


def test_spans_with_decorators_and_non_ascii() -> None:
    text = _doc(
        '''
        # é comment
        @decorate
        class Net(nn.Module):  # ünïcode
            """Dokumentation: äöü."""

            def forward(self, x: "Tensor", *rest, scale: float = 1.0, **kw):
                y = "ä" + helper(x) + self._aux(x)
                return y

            def _aux(self, x):
                return x

        def helper(x):
            return x
        '''
    )
    (net,) = find_classes(text)
    assert net.line == 3
    assert net.name_span == Span(3, 6, 3, 9)
    assert net.span == Span(2, 0, 11, 16)
    assert net.body.line == 4
    fwd = net.forward
    assert fwd is not None
    assert fwd.span == Span(6, 4, 8, 16)
    assert fwd.name_span == Span(6, 8, 6, 15)
    params = [(p.name, p.kind, p.has_default, p.annotation) for p in fwd.params]
    assert params == [
        ("x", "positional_or_keyword", False, '"Tensor"'),
        ("rest", "var_positional", False, None),
        ("scale", "keyword_only", True, "float"),
        ("kw", "var_keyword", False, None),
    ]
    assert fwd.helpers == ["helper", "_aux"]


def test_columns_are_code_points_not_bytes() -> None:
    text = (
        "x = 'ää'; from torch import nn\n"
        "class Ü(nn.Module):\n"
        "    def forward(self, ä):\n"
        "        return ä\n"
    )
    (cls,) = find_classes(text)
    assert cls.name_span == Span(2, 6, 2, 7)
    assert cls.forward is not None
    assert cls.forward.params[0].span == Span(3, 22, 3, 23)


def test_inherited_forward_from_a_class_of_the_same_file() -> None:
    text = _doc(
        """
        class Base(nn.Module):
            def forward(self, x, mask=None):
                return x

        # fxls: mask = None
        class Child(Base):
            pass
        """
    )
    base, child = find_classes(text)
    assert child.forward is None
    assert child.effective_forward is base.forward
    assert [s.name for s in child.inputs] == ["mask"]


@pytest.mark.parametrize(
    ("annotation", "dims", "dtype"),
    [
        (
            'Float[Tensor, "batch 3 224 224"]',
            [("batch", None), (None, 3), (None, 224), (None, 224)],
            None,
        ),
        (
            'Float[torch.Tensor, "b c h w"]',
            [("b", None), ("c", None), ("h", None), ("w", None)],
            None,
        ),
        ('jaxtyping.Int[Tensor, "batch seq"]', [("batch", None), ("seq", None)], "int64"),
        ('Int64[Tensor, "B T"]', [("B", None), ("T", None)], "int64"),
        ('Bool[Tensor, "B T"]', [("B", None), ("T", None)], "bool"),
        ('Float16[Tensor, "B T dim"]', [("B", None), ("T", None), ("dim", None)], "float16"),
        ('BFloat16[Tensor, "#B T"]', [("B", None), ("T", None)], "bfloat16"),
        ('Float[Tensor, ""]', [], None),
        ("\"Float[Tensor, 'n 4']\"", [("n", None), (None, 4)], None),
    ],
)
def test_jaxtyping_annotations(
    annotation: str, dims: list[tuple[str | None, int | None]], dtype: str | None
) -> None:
    text = f"class Net(nn.Module):\n    def forward(self, x: {annotation}):\n        return x\n"
    (net,) = find_classes(text)
    (spec,) = net.inputs
    assert spec.source == "annotation"
    assert spec.kind == "shape"
    assert spec.dims == [DimSpec(n, s) for n, s in dims]
    assert spec.dtype == dtype
    assert spec.line == 2


@pytest.mark.parametrize(
    "annotation",
    [
        'Float[Tensor, "*batch 3"]',
        'Float[Tensor, "... 3"]',
        'Float[Tensor, "_ 3"]',
        'Float[Tensor, "dim-1 3"]',
        "Tensor",
        "Optional[Tensor]",
        "List[int]",
        "Float[Tensor]",
    ],
)
def test_annotations_without_a_usable_shape(annotation: str) -> None:
    text = f"class Net(nn.Module):\n    def forward(self, x: {annotation}):\n        return x\n"
    (net,) = find_classes(text)
    assert net.inputs == []


def test_syntax_error_never_raises() -> None:
    result = parse("from torch import nn\nclass Net(nn.Module):\n    def forward(self, x:\n")
    assert result.classes == []
    assert result.syntax_error is not None
    assert result.syntax_error.span.line in (3, 4)
    assert result.syntax_error.message
    for broken in [
        "class",
        "def f(:",
        "x = (",
        "\x00",
        "(" * 500 + ")" * 500,
        "if x:\npass",
        "é = )",
    ]:
        r = parse(broken)
        assert r.syntax_error is not None or r.classes == []
    assert find_classes("class A(") == []


def test_examples_are_found_with_their_directives() -> None:
    resnet = {c.name: c for c in find_classes((EXAMPLES / "resnet.py").read_text())}
    assert set(resnet) == {"BasicBlock", "Bottleneck", "ResNet", "ResNet18"}
    assert resnet["ResNet"].inputs[0].dims[0] == DimSpec("B", 2)
    assert resnet["Bottleneck"].directives.init == "inplanes=256, planes=64"
    gpt = {c.name: c for c in find_classes((EXAMPLES / "gpt.py").read_text())}
    assert "GPTConfig" not in gpt
    idx = gpt["GPT"].inputs[0]
    assert (idx.name, idx.source, idx.dtype) == ("idx", "directive", "int64")
    attn = gpt["CausalSelfAttention"].inputs[0]
    assert (attn.source, attn.dims[2]) == ("directive", DimSpec(None, 64))
    block = gpt["Block"].inputs[0]
    assert (block.source, [d.name for d in block.dims]) == ("annotation", ["B", "T", None])
    for name in ("cnn.py", "broken.py"):
        assert parse((EXAMPLES / name).read_text()).diagnostics == []


_FRAGMENTS = [
    "class A(nn.Module):\n",
    "    def forward(self, x: Float[Tensor, 'b 3']):\n",
    "        return x\n",
    "# fxls: x = (B=2, 3)\n",
    "# fxls: init(\n",
    "@dec\n",
    '"""\n',
    "\ufeff",
    "é",
    "\r\n",
    "\t",
    "(",
    ")",
    "# fxls: leaf\n",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=8), max_size=12))
def test_parse_never_raises(parts: list[str]) -> None:
    result = parse("".join(parts))
    assert (result.syntax_error is None) or result.classes == []
    for diag in result.diagnostics:
        assert diag.code == "FX403"
        assert diag.span.line >= 1 and diag.span.col >= 0
