"""Every value a hover or an inlay hint shows is right, or says for which sizes it holds.

Three fixtures of ``tests/fixtures/capture/``, captured in-process and once through the real
worker, each compared with eager runs of the fixture at two batch sizes:

- ``example_sizes.py``: an operation fixes the batch size to its example size while shapes are
  computed (``F.interpolate``, ``len(x)``); the shapes after it still follow ``B``, and where
  they really depend on the example size they say so;
- ``early_return.py``: a helper that returns its argument (``if n_rep == 1: return x``) is
  never shown as returning a value it computed inside;
- ``instances.py``: code that runs in several instances with other sizes (the residual of an
  inverted-residual block, a helper called from two lines): one instance's values, named,
  with the number of the others that differ.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from fxls.analysis import parse
from fxls.engine.analyze import build_requests
from fxls.lsp.features import hover
from fxls.lsp.features.inlay_hints import shape_hints
from fxls.protocol.codec import from_dict, to_dict
from fxls.protocol.copies import expanded
from fxls.protocol.model import CaptureJob, CaptureResult, ModuleResult, NodeInfo
from fxls.worker.capture.build.inputs import value_of
from fxls.worker.capture.pipeline import run_capture

FIXTURES = Path(__file__).parents[2] / "fixtures" / "capture"
SIZES = ({"B": 2, "T": 5}, {"B": 3, "T": 7})
"""The two sizes every shape is checked at (the example sizes are neither for ``T``)."""


def _path(name: str) -> Path:
    return FIXTURES / name


def _job(name: str) -> CaptureJob:
    text = _path(name).read_text(encoding="utf-8")
    return CaptureJob(
        path=str(_path(name)), source=text, classes=build_requests(parse(text).classes)
    )


_CAPTURED: dict[str, dict[str, ModuleResult]] = {}


def _capture(name: str) -> dict[str, ModuleResult]:
    if name not in _CAPTURED:
        result = run_capture(_job(name), lambda phase, cls: None)
        assert result.error is None
        assert from_dict(CaptureResult, to_dict(result)) == result  # survives the wire
        _CAPTURED[name] = {m.name: m for m in result.modules}
    return _CAPTURED[name]


def _load(name: str) -> ModuleType:
    module_name = f"fxls_fixture_shown_{name.removesuffix('.py')}"
    spec = importlib.util.spec_from_file_location(module_name, _path(name))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _lines(name: str) -> list[str]:
    return _path(name).read_text(encoding="utf-8").split("\n")


def _line(name: str, needle: str, after: int = 0) -> int:
    return next(i for i, text in enumerate(_lines(name), 1) if needle in text and i > after)


# -- eager runs ---------------------------------------------------------------------------


class _Recorder(TorchFunctionMode):
    """The shape of every tensor each line of the fixture makes (torch functions and tensor
    methods called while a frame of the fixture is on the stack, by its innermost line)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.shapes: dict[int, list[list[int]]] = {}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.path:
            frame = frame.f_back
        if frame is not None:
            for tensor in _tensors(out):
                self.shapes.setdefault(frame.f_lineno, []).append(list(tensor.shape))
        return out


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


def _eager(name: str, module: torch.nn.Module, *inputs: Any) -> tuple[Any, dict[int, Any]]:
    recorder = _Recorder(str(_path(name)))
    module.eval()
    with torch.no_grad(), recorder:
        out = module(*inputs)
    return out, recorder.shapes


def _concrete(shape: Sequence[int | str] | None, sizes: dict[str, int]) -> list[int]:
    assert shape is not None
    return [d if isinstance(d, int) else int(eval(d, {"__builtins__": {}}, sizes)) for d in shape]


def _node_shapes(node: NodeInfo, sizes: dict[str, int]) -> list[list[int]]:
    return [_concrete(v.shape, sizes) for v in node.outputs if v.kind == "tensor"]


def _check_nodes(mod: ModuleResult, eager: dict[int, Any], sizes: dict[str, int]) -> int:
    """Every tensor a call node of ``mod`` shows (but those said to hold for the example
    sizes only) is made by eager execution on one of the node's lines. Returns how many."""
    checked = 0
    for node in mod.nodes:
        if not node.op.startswith("call") or node.span is None or node.name in mod.example_nodes:
            continue
        made = [
            s for line in range(node.span.line, node.span.end_line + 1) for s in eager.get(line, [])
        ]
        for shape in _node_shapes(node, sizes):
            assert shape in made, (mod.name, node.name, shape, sizes, made)
            checked += 1
    return checked


# ---------------------------------------------------------------------------------------
# 1. Shapes after an operation that fixes a named dimension
# ---------------------------------------------------------------------------------------

EXAMPLE_SIZES = "example_sizes.py"


def _sample(cls: str, sizes: dict[str, int]) -> tuple[Any, ...]:
    b, t = sizes["B"], sizes["T"]
    if cls == "Upsample":
        return (torch.randn(b, 3, 16, 16),)
    if cls == "TinyLanguageModel":
        return (torch.randint(0, 50, (t, b)),)
    return (torch.randn(b, 16),)


def _build(fixture: ModuleType, cls: str) -> torch.nn.Module:
    if cls == "TinyLanguageModel":
        return fixture.TinyLanguageModel(ntoken=50, ninp=16, nhead=2)
    return getattr(fixture, cls)()


@pytest.mark.parametrize("cls", ["Upsample", "CountRows", "TinyLanguageModel"])
def test_shapes_after_a_fixed_size_keep_the_name(cls: str) -> None:
    """``F.interpolate`` and ``len()`` fix the name while shapes are computed; computed again
    at another size, every shape after them is written in the name and holds at any size."""
    mod = _capture(EXAMPLE_SIZES)[cls]
    assert mod.status in ("traced", "partial") and mod.outputs
    assert mod.example_nodes == [] and mod.example_sizes == {}
    fixed = "T" if cls == "TinyLanguageModel" else "B"
    assert any(f"fixes {fixed} to" in note for note in mod.notes), mod.notes
    assert fixed in (mod.outputs[0].shape or [])  # the name, not the example size
    fixture = _load(EXAMPLE_SIZES)
    for sizes in SIZES:
        torch.manual_seed(0)
        out, lines = _eager(EXAMPLE_SIZES, _build(fixture, cls), *_sample(cls, sizes))
        assert _concrete(mod.outputs[0].shape, sizes) == list(out.shape)
        assert _check_nodes(mod, lines, sizes) >= 2


@pytest.mark.parametrize("cls", ["AllPairs", "TwoRows"])
def test_shapes_that_depend_on_the_example_size_say_so(cls: str) -> None:
    """``B*B`` rows, a view written for two rows: the numbers hold for B = 2 only, and the
    capture lists those nodes; every other shape holds at any size."""
    mod = _capture(EXAMPLE_SIZES)[cls]
    assert mod.example_sizes == {"B": 2}
    output = next(n for n in mod.nodes if n.op == "output")
    assert output.name in mod.example_nodes
    fixture = _load(EXAMPLE_SIZES)
    at_two = {"B": 2, "T": 5}
    out, lines = _eager(EXAMPLE_SIZES, _build(fixture, cls), *_sample(cls, at_two))
    assert _concrete(mod.outputs[0].shape, at_two) == list(out.shape)
    _check_nodes(mod, lines, at_two)
    bound = [n for n in mod.nodes if n.name in mod.example_nodes and n.op.startswith("call")]
    assert bound
    for node in bound:  # at B = 2 the numbers are what eager makes ...
        made = [
            s for line in range(node.span.line, node.span.end_line + 1) for s in lines.get(line, [])
        ]  # type: ignore[union-attr]
        assert all(shape in made for shape in _node_shapes(node, at_two))
    try:  # ... and at B = 3 they are not (or the code fails): the caveat is needed
        out, _ = _eager(EXAMPLE_SIZES, _build(fixture, cls), *_sample(cls, SIZES[1]))
    except RuntimeError:
        assert cls == "TwoRows"
    else:
        assert _concrete(mod.outputs[0].shape, SIZES[1]) != list(out.shape)
        assert cls == "AllPairs"


def test_what_depends_on_the_example_size_is_said_in_hovers_hints_and_the_lens() -> None:
    from fxls.lsp.features.code_lens import lens_title

    mods = list(_capture(EXAMPLE_SIZES).values())
    lines = _lines(EXAMPLE_SIZES)
    source = "\n".join(lines)
    hints = {h.line: h.label for h in shape_hints(mods, source)}
    line = _line(EXAMPLE_SIZES, "return y.view(2, 4, 2)")
    assert hints[line] == "▸ [2, 4, 2] · holds for B = 2"
    col = lines[line - 1].index("view") + 1
    text = hover.hover_text(mods, lines, line, col)
    assert text is not None and "holds for B = 2" in text.markdown
    upsample = _line(EXAMPLE_SIZES, "y = F.interpolate(")
    assert hints[upsample] == "▸ [B, 3, 32, 32]"
    by_name = {m.name: m for m in mods}
    assert "[B, 16] → [2, 4, 2] (holds for B = 2)" in lens_title(by_name["TwoRows"])
    assert "[B, 3, 16, 16] → [B, 10]" in lens_title(by_name["Upsample"])
    summary = hover.class_markdown(by_name["AllPairs"])
    assert "[4, 8] float32 (holds for B = 2 only)" in summary


BATCH_OF_ONE = "batch_of_one.py"


def test_a_name_given_as_one_is_said_wherever_a_one_may_stand_for_it() -> None:
    """``# fxls: x = (B=1, ...)``: the shapes print 1 where ``B`` goes (torch makes sizes 0
    and 1 numbers), and an eager run at B = 2 shows that 1 was ``B``. The lens, the class
    hover and a call's hover say so; a class whose names are 2 or more, none of it."""
    from fxls.lsp.features.code_lens import lens_title

    mods = _capture(BATCH_OF_ONE)
    one, named = mods["Classifier"], mods["Named"]
    assert one.input_sizes == {"B": 1} and one.outputs[0].shape == [1, 10]
    fixture = _load(BATCH_OF_ONE)
    out, _ = _eager(BATCH_OF_ONE, _build(fixture, "Classifier"), torch.zeros(2, 3, 8, 8))
    assert list(out.shape) == [2, 10]  # the 1 shown was B: the note is needed
    assert "[B, 3, 8, 8] → [1, 10] (holds for B = 1)" in lens_title(one)
    summary = hover.class_markdown(one)
    assert "[1, 10] float32 (holds for B = 1)" in summary and "only" not in summary
    assert "torch fixes sizes 0 and 1, so a 1 shown may be B" in summary
    lines = _lines(BATCH_OF_ONE)
    line = _line(BATCH_OF_ONE, "return self.head(pooled)")
    text = hover.hover_text(list(mods.values()), lines, line, lines[line - 1].index("head") + 1)
    assert text is not None and "B = 1 in the example: a 1 shown may be B" in text.markdown
    # B = 2: the shapes keep the name; the 1 of ``keepdim`` is no name's
    assert named.outputs[0].shape == ["B", 4, 1, 1]
    assert "holds for" not in lens_title(named)
    assert "shown may be" not in hover.class_markdown(named)
    # a class run with the parent's arguments: its 1s may be the parent's B too
    stem = mods["Stem"]
    assert stem.input_sizes == {"B": 1} and stem.outputs[0].shape == [1, 4, 8, 8]
    assert [i.origin for i in stem.inputs] == ["parent"]
    assert "→ [1, 4, 8, 8] (holds for B = 1)" in lens_title(stem)
    assert "so a 1 shown may be B" in hover.class_markdown(stem)


# ---------------------------------------------------------------------------------------
# 2. A helper that returns its argument
# ---------------------------------------------------------------------------------------

EARLY = "early_return.py"


def test_a_helper_that_returns_its_argument_shows_no_value_of_its_own() -> None:
    """``repeat_kv(xk, 1)`` returns ``xk``: the only values made inside (the sizes of
    ``x.shape``) are not its result, and neither the hover nor the hint shows them as it."""
    mods = list(_capture(EARLY).values())
    lines = _lines(EARLY)
    line = _line(EARLY, "keys = repeat_kv(xk")
    col = lines[line - 1].index("repeat_kv") + 2
    text = hover.hover_text(mods, lines, line, col, style="block")
    assert text is not None
    output = text.markdown.split("\n")[1]
    assert output == f"→ {hover.NO_RESULT}", text.markdown
    assert "16" not in output  # head_dim, the last size made inside
    assert line not in {h.line for h in shape_hints(mods, "\n".join(lines))}
    # the nodes of the class still agree with eager execution
    attention = next(m for m in mods if m.name == "Attention")
    fixture = _load(EARLY)
    for sizes in SIZES:
        module = fixture.Attention(dim=64, n_heads=4, n_kv_heads=4)
        out, eager = _eager(EARLY, module, torch.randn(sizes["B"], sizes["T"], 64))
        assert _concrete(attention.outputs[0].shape, sizes) == list(out.shape)
        assert _check_nodes(attention, eager, sizes) >= 10


def test_a_helper_that_computes_its_result_shows_it() -> None:
    """With two query heads per key/value head, ``repeat_kv`` computes its result: the hover
    of its call and the hint of the line show what eager ``repeat_kv`` returns."""
    mods = _capture(EARLY)
    grouped = mods["GroupedAttention"]
    lines = _lines(EARLY)
    line = _line(EARLY, "keys = repeat_kv(xk")
    col = lines[line - 1].index("repeat_kv") + 2
    text = hover.hover_text([grouped], lines, line, col, style="block")
    assert text is not None
    fixture = _load(EARLY)
    for sizes in SIZES:
        xk = torch.randn(sizes["B"], sizes["T"], 2, 16)
        expected = list(fixture.repeat_kv(xk, 2).shape)
        shown = text.markdown.split("\n")[1].removeprefix("→ ").removesuffix(" float32")
        assert _concrete(shown.strip("[]").split(", "), sizes) == expected
    hints = {h.line: h.label for h in shape_hints([grouped], "\n".join(lines))}
    assert hints[line] == "▸ [B, T, 4, 16]"


# ---------------------------------------------------------------------------------------
# 3. Code that runs in several instances
# ---------------------------------------------------------------------------------------

INSTANCES = "instances.py"


def test_one_instance_of_a_residual_named_with_the_count_of_the_others() -> None:
    """``x + self.conv(x)`` runs in four blocks of ``TinyMobileNet`` (and in
    ``InvertedResidual``'s own capture, which is ``features.0``): the hover and the hint show
    ``features.0``'s values, never another block's output over its input."""
    mods = list(_capture(INSTANCES).values())
    by_name = {m.name: m for m in mods}
    assert "features.0.conv" in by_name["TinyMobileNet"].containers
    lines = _lines(INSTANCES)
    line = _line(INSTANCES, "return x + self.conv(x)")
    col = lines[line - 1].index("x + self") + 2
    text = hover.hover_text(mods, lines, line, col, style="block")
    assert text is not None
    shown = text.markdown.split("\n")
    assert shown[1] == "→ [B, 8, 32, 32] float32"
    assert shown[3] == "TinyMobileNet.features.0 · 1 of 4 instances · 3 others differ"
    assert "[B, 8, 32, 32]" in shown[4] and "[B, 8, 32, 32]" in shown[5]  # a and b
    hints = {h.line: h.label for h in shape_hints(mods, "\n".join(lines))}
    assert hints[line] == (
        "▸ [B, 8, 32, 32] · TinyMobileNet.features.0 · 1 of 4 instances · 3 others differ"
    )
    # what features.0 receives and returns, eagerly, at two batch sizes
    fixture = _load(INSTANCES)
    for sizes in SIZES:
        net = fixture.TinyMobileNet().eval()
        x = torch.randn(sizes["B"], 8, 32, 32)
        with torch.no_grad():
            out = net.features[0](x)
        assert _concrete(["B", 8, 32, 32], sizes) == list(out.shape) == list(x.shape)
        _, eager = _eager(INSTANCES, net, x)
        assert _check_nodes(by_name["TinyMobileNet"], eager, sizes) >= 20


def test_a_helper_called_from_two_lines_shows_the_first_call() -> None:
    mods = list(_capture(INSTANCES).values())
    lines = _lines(INSTANCES)
    line = _line(INSTANCES, "return F.adaptive_avg_pool2d(x, size).flatten(1)")
    first = _line(INSTANCES, "coarse = pooled(y, 1)")
    hints = {h.line: h.label for h in shape_hints(mods, "\n".join(lines))}
    assert hints[line] == f"▸ [B, 4] · the call at line {first} · 1 of 2 calls · 1 other differs"
    assert hints[first] == "▸ [B, 4]" and hints[first + 1] == "▸ [B, 16]"
    col = lines[line - 1].index("flatten") + 1
    text = hover.hover_text(mods, lines, line, col, style="block")
    assert (
        text is not None
        and "the call at line" in text.markdown
        and "→ [B, 4] float32" in text.markdown
    )
    fixture = _load(INSTANCES)
    for sizes in SIZES:
        net = fixture.TwoScales().eval()
        coarse, fine = net(torch.randn(sizes["B"], 8, 16, 16))
        assert [list(coarse.shape), list(fine.shape)] == [[sizes["B"], 4], [sizes["B"], 16]]


# ---------------------------------------------------------------------------------------
# 4. A weight read where a call uses it
# ---------------------------------------------------------------------------------------

LAZY = "lazy_weight.py"


def test_a_weight_read_where_the_call_uses_it_is_the_calls_argument() -> None:
    """``Model`` is captured by a run on fake tensors, where ``self.weight`` is read at the
    ``F.linear`` call and takes its span: the hover of that call shows the weight as the
    call's argument in every class, so the runs agree (it said "1 other differs" and showed
    no shape for the weight in ``Model``'s run). The shapes are eager's at two sizes."""
    mods = _capture(LAZY)
    assert mods["Model"].strategy.method == "fake-run"
    lines = _lines(LAZY)
    line = _line(LAZY, "logits = F.linear(")
    col = lines[line - 1].index("linear") + 1
    for scope in (list(mods.values()), [mods["Model"]]):
        text = hover.hover_text(scope, lines, line, col, style="block")
        assert text is not None
        assert "differ" not in text.markdown, text.markdown
        assert "weight" in text.markdown and "[4, 32] float32" in text.markdown, text.markdown
        assert "[B*T, 4] float32" in text.markdown, text.markdown
    fixture, seen = _load(LAZY), []
    model = fixture.Model()
    model.layers[1].gate.register_forward_hook(lambda m, a, out: seen.append(out.shape))
    for sizes in SIZES:
        model(torch.zeros(sizes["B"], sizes["T"], dtype=torch.long))
        assert list(seen[-1]) == [sizes["B"] * sizes["T"], 4]


# ---------------------------------------------------------------------------------------
# Through the real worker (zygote, fork, sandbox)
# ---------------------------------------------------------------------------------------


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.timeout(180)
async def test_the_worker_sends_what_the_views_need(worker) -> None:  # type: ignore[no-untyped-def]
    """The same captures through the sandboxed worker: the shapes written in the names, the
    nodes that hold for the example sizes only, the containers instances are told by."""
    sent: dict[str, dict[str, ModuleResult]] = {}
    for name in (EXAMPLE_SIZES, EARLY, INSTANCES):
        result = await worker.run(_job(name))
        assert result.kind == "ok", (result.message, result.output_head)
        assert result.payload is not None
        # copied sub-blocks come as copies (what the wire carries): expanded as the engine does
        sent[name] = {m.name: expanded(m) for m in result.payload.modules}
    for name, mods in sent.items():
        here = _capture(name)
        for cls, mod in mods.items():
            assert [n.outputs for n in mod.nodes] == [n.outputs for n in here[cls].nodes], cls
            assert (mod.example_nodes, mod.example_sizes) == (
                here[cls].example_nodes,
                here[cls].example_sizes,
            )
            assert mod.containers == here[cls].containers
    assert sent[EXAMPLE_SIZES]["Upsample"].outputs[0].shape == ["B", 10]
    assert sent[EXAMPLE_SIZES]["TwoRows"].example_sizes == {"B": 2}
    assert "features.0.conv" in sent[INSTANCES]["TinyMobileNet"].containers


def test_a_tuple_of_one_tensor_is_shown_as_a_tuple() -> None:
    # diffusers' up blocks take `res_hidden_states_tuple`: one skip connection was shown as
    # `([B, 64, 224, 224])`, which reads as one tensor, not a tuple holding one
    one = (torch.zeros(2, 64, 8, 8),)
    named = [[("B", 2), (None, 64), (None, 8), (None, 8)]]
    assert value_of(one, named).text == "([B, 64, 8, 8],)"
    assert value_of((*one, *one), named * 2).text == "([B, 64, 8, 8], [B, 64, 8, 8])"
    assert value_of([*one], named).text == "[[B, 64, 8, 8]]"
