"""Trace failures are located at the user's code and explained with the right FX1xx code."""

from __future__ import annotations

from pathlib import Path

import pytest

from fxls.protocol.catalogue import ALL_MESSAGES
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import (
    CaptureJob,
    ClassRequest,
    Diagnostic,
    DimSpec,
    InputSpec,
    ModuleResult,
    Span,
)
from fxls.worker.capture.pipeline import run_capture
from fxls.worker.capture.reporting import one_line

FIXTURE = Path(__file__).parents[2] / "fixtures" / "capture" / "trace_failures.py"
TEXT = FIXTURE.read_text(encoding="utf-8")
LINES = TEXT.splitlines()


def _span(needle: str, after: str) -> Span:
    start = next(i for i, line in enumerate(LINES) if after in line)
    index = next(i for i in range(start, len(LINES)) if needle in LINES[i])
    col = LINES[index].index(needle)
    return Span(index + 1, col, index + 1, col + len(needle))


def _class_line(name: str) -> int:
    return next(i for i, line in enumerate(LINES, start=1) if line.startswith(f"class {name}("))


TRACE_FAILURES = {"FX101", "FX102", "FX103", "FX104", "FX105", "FX106", "FX107", "FX199"}


def _errors(mod: ModuleResult) -> list[Diagnostic]:
    return [d for d in mod.diagnostics if d.severity == "error"]


def _failures(mod: ModuleResult) -> list[Diagnostic]:
    """Trace failures: torch.fx cannot trace the code (never errors: the code runs)."""
    return [d for d in mod.diagnostics if d.code in TRACE_FAILURES]


CASES = [
    # class, code, exact source of the blamed span
    ("ControlFlow", "FX101", "x.sum() > 0"),
    ("FlagArgument", "FX101", "flag"),
    ("Asserts", "FX101", "x.dim() == 2"),
    ("UsesLen", "FX102", "len(x)"),
    ("Iterates", "FX103", "[r for r in x]"),
    ("IntSize", "FX104", "int(x.size(1) * 0.5)"),
    ("RangeSize", "FX104", "range(x.size(0))"),
    ("Factory", "FX105", "torch.zeros(x.size(0), x.size(1))"),
    ("PlainTensorSlice", "FX106", "self.mask[:T, :T]"),
    ("HasEncoder", "FX107", "self.enc(x)"),
    ("Other", "FX199", "torch.no_such_function_fxls"),
]


@pytest.fixture(scope="module")
def modules() -> dict[str, ModuleResult]:
    classes = [ClassRequest(name, _class_line(name)) for name, _, _ in CASES]
    classes.append(
        ClassRequest(
            "Checks",
            _class_line("Checks"),
            inputs=[InputSpec("x", dims=[DimSpec("B"), DimSpec(None, 4)])],
        )
    )
    job = CaptureJob(path=str(FIXTURE), source=TEXT, classes=classes)
    result = run_capture(job, lambda *_: None)
    assert result.error is None
    return {mod.name: mod for mod in result.modules}


@pytest.mark.parametrize(("name", "code", "source"), CASES, ids=[c[0] for c in CASES])
def test_failure_located_and_explained(
    modules: dict[str, ModuleResult], name: str, code: str, source: str
) -> None:
    mod = modules[name]
    if name == "HasEncoder":
        # the failing submodule is kept as a leaf, the rest of the model still traces
        assert (
            mod.status == "traced"
            and strategy_label(mod.strategy) == "fx+leaf"
            and mod.error is None
        )
        assert any(n.op == "call_module" and n.target == "enc" for n in mod.nodes)
    elif name == "Iterates":
        # the module-level helper that failed is recorded as one call (auto-wrapped)
        # shapes stop at the wrapped call (its output is not known): partial
        assert (
            mod.status == "partial"
            and strategy_label(mod.strategy) == "fx+wrap"
            and mod.error is None
        )
        assert any(n.op == "call_function" and n.target.endswith("rows") for n in mod.nodes)
    else:
        assert mod.status == "failed" and strategy_label(mod.strategy) == "none"
        assert mod.error is not None and mod.error.phase == "trace"
        assert mod.error.kind == "exception"
    # the code runs: never an error. Worked around (the module still has shapes): information;
    # not worked around: a warning
    severity = "information" if mod.status in ("traced", "partial") and mod.outputs else "warning"
    assert _errors(mod) == []
    found = [d for d in _failures(mod) if d.code == code]
    assert [d.severity for d in found] == [severity]
    (diag,) = found
    after = {"Iterates": "def rows", "FlagArgument": "if flag:"}.get(name, f"class {name}(")
    assert diag.span == _span(source, after)
    assert f"`{source}`" in diag.message or code in ("FX107", "FX199")
    assert diag.fix
    assert diag.code in ALL_MESSAGES


def test_iteration_in_a_helper_relates_the_forward_call(modules: dict[str, ModuleResult]) -> None:
    (diag,) = _failures(modules["Iterates"])
    assert [r.span for r in diag.related] == [_span("rows(x)", "class Iterates(")]


def test_flag_fix_names_the_argument(modules: dict[str, ModuleResult]) -> None:
    (diag,) = _failures(modules["FlagArgument"])
    assert diag.fix is not None and "# fxls: flag = True" in diag.fix


def test_len_fix_names_the_value(modules: dict[str, ModuleResult]) -> None:
    (diag,) = _failures(modules["UsesLen"])
    assert diag.fix is not None and "x.size(0)" in diag.fix


def test_torch_module_failure_names_the_module(modules: dict[str, ModuleResult]) -> None:
    (diag,) = [d for d in modules["HasEncoder"].diagnostics if d.code == "FX107"]
    assert "MyEncoder" in diag.message
    assert diag.fix is not None and "leaf MyEncoder" in diag.fix


def test_specialized_checks_warn(modules: dict[str, ModuleResult]) -> None:
    mod = modules["Checks"]
    assert mod.status == "traced"
    warnings = [d for d in mod.diagnostics if d.code == "FX108"]
    # `x is None` on an optional tensor is correct code: no warning
    assert [w.span for w in warnings] == [_span("isinstance(x, torch.Tensor)", "class Checks(")]
    assert all(w.severity == "warning" for w in warnings)
    # the isinstance branch was not taken while tracing: fc is missing from the graph
    assert not any(n.op == "call_module" for n in mod.nodes)


def test_failure_in_one_class_keeps_the_others(modules: dict[str, ModuleResult]) -> None:
    assert len(modules) == len(CASES) + 1
    assert modules["Checks"].outputs[0].shape == ["B", 4]


def test_failure_inside_a_traced_submodule_blames_its_line() -> None:
    source = (
        "import torch.nn as nn\n\n"
        "class Inner(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if x.mean() > 0:  # ünïcödé\n"
        "            return x\n"
        "        return x.relu()\n\n"
        "class Outer(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.inner = Inner()\n\n"
        "    def forward(self, x):\n"
        "        ø = 1; return self.inner(x) * ø\n"
    )
    job = CaptureJob(path="/virtual/outer.py", source=source, classes=[ClassRequest("Outer", 9)])
    (mod,) = run_capture(job, lambda *_: None).modules
    (diag,) = _failures(mod)
    assert diag.severity == "warning"
    assert diag.code == "FX101" and diag.data["leaf"] == "Inner"
    assert (
        mod.status == "partial" and strategy_label(mod.strategy) == "fx+leaf"
    )  # no inputs known: no shapes
    assert [n.target for n in mod.nodes if n.op == "call_module"] == ["inner"]
    assert diag.span == Span(5, 11, 5, 23)
    call = source.splitlines()[14]
    col = call.index("self.inner(x)")
    assert diag.related[0].span == Span(15, col, 15, col + len("self.inner(x)"))


def test_torch_module_subclass_as_root_blames_the_class() -> None:
    line = _class_line("MyEncoder")
    request = ClassRequest(
        "MyEncoder", line, init="16, 2, dim_feedforward=32, batch_first=True", init_line=line
    )
    job = CaptureJob(path=str(FIXTURE), source=TEXT, classes=[request])
    (mod,) = run_capture(job, lambda *_: None).modules
    assert mod.status == "failed" and mod.build == "meta"
    (diag,) = _failures(mod)
    assert diag.severity == "warning"
    assert diag.code == "FX107" and "MyEncoder" in diag.message
    col = LINES[line - 1].index("MyEncoder")
    assert diag.span == Span(line, col, line, col + len("MyEncoder"))


def test_untraceable_root_falls_back_to_a_fake_run() -> None:
    spec = InputSpec("x", dims=[DimSpec("B"), DimSpec("T", 6)])
    classes = [
        ClassRequest(name, _class_line(name), inputs=[spec])
        for name in ("Asserts", "Factory", "ControlFlow")
    ]
    job = CaptureJob(path=str(FIXTURE), source=TEXT, classes=classes)
    asserts, factory, control = run_capture(job, lambda *_: None).modules
    for mod, code, used in ((asserts, "FX101", "fx+decided"), (factory, "FX105", "fake-run")):
        # the failure is still reported; shapes come from running forward on fake tensors, or
        # from the graph where the check is on the input's rank (`assert x.dim() == 2`)
        assert [d.code for d in mod.diagnostics if d.severity == "information"
                and d.code in TRACE_FAILURES] == [code]  # fmt: skip
        assert not [d for d in mod.diagnostics if d.severity == "error"]
        assert mod.status == "traced" and strategy_label(mod.strategy) == used and mod.error is None
        assert mod.inputs[0].value.shape == ["B", "T"]
        assert mod.outputs[0].shape == ["B", "T"]
    (check,) = [d for d in asserts.diagnostics if d.code == "FX101"]
    assert check.data["value"] is True and "`True` for these inputs" in (check.fix or "")
    # the fake run records the operations with their spans and shapes
    (zeros,) = [n for n in factory.nodes if n.target == "torch.zeros"]
    assert zeros.span == _span("torch.zeros(x.size(0), x.size(1))", "class Factory(")
    assert zeros.outputs[0].shape == ["B", "T"]
    # a branch on tensor values has no value on fake tensors either: the run takes it one
    # way (false) and says so at the condition
    assert control.status == "traced" and strategy_label(control.strategy) == "fake-run"
    assert control.error is None and len(control.outputs) == 1
    (total,) = [n for n in control.nodes if n.target == "sum"]
    assert total.span == _span("x.sum()", "class ControlFlow(")
    assert [(d.code, d.severity) for d in _failures(control)] == [("FX101", "information")]
    (taken,) = _failures(control)
    assert taken.data["value"] is False and "as `False`" in (taken.fix or "")


def test_code_quoted_in_messages_is_one_short_line() -> None:
    """Multi-line code is one line; a long call keeps its callee (``self.attn1(…)``), other
    long code is cut with an ellipsis; empty text gives the fallback (a node name)."""
    from fxls.worker.capture.spans import SHORT_SOURCE, short_source

    call = "self.attn1(\n    norm_hidden_states,\n    encoder_hidden_states=states,\n    **kw,\n)"
    assert short_source(call) == "self.attn1(…)"
    condition = "not interpolate_pos_encoding and (height != self.image_size or width != 3)"
    shown = short_source(condition)
    assert shown.startswith("not interpolate_pos_encoding and (height") and shown.endswith("…")
    assert len(shown) == SHORT_SOURCE
    assert short_source("x + 1") == "x + 1"
    assert short_source("  ", "getitem_5") == "getitem_5"


def test_a_failure_in_an_inherited_forward_of_another_file_quotes_that_code(
    tmp_path: Path,
) -> None:
    """A class whose ``forward`` comes from a base in another module (transformers'
    ``LlamaForSequenceClassification`` inherits ``GenericForSequenceClassification.forward``):
    the failure is reported at the class, quoting the line that raised and where it is, not
    an empty ``` `` ```."""
    (tmp_path / "fxls_generic_heads.py").write_text(
        "from torch import nn\n\n\n"
        "class GenericHead(nn.Module):\n"
        "    def forward(self, x):\n"
        "        if x.sum() > 0:\n"
        "            return self.proj(x)\n"
        "        return x\n"
    )
    text = (
        "from torch import nn\nfrom fxls_generic_heads import GenericHead\n\n\n"
        "class Head(GenericHead):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(8, 8)\n"
    )
    path = tmp_path / "model.py"
    path.write_text(text)
    job = CaptureJob(
        path=str(path),
        source=text,
        classes=[ClassRequest("Head", 5, inputs=[InputSpec("x", [DimSpec("B", 2), 8])])],
        sys_path=[str(tmp_path)],
    )
    result = run_capture(job, lambda *_: None)
    (mod,) = result.modules
    (failure,) = [d for d in mod.diagnostics if d.code == "FX101"]
    assert failure.span.line == 5
    assert "`if x.sum() > 0:` in `GenericHead.forward`" in failure.message, failure.message
    assert "fxls_generic_heads.py, line 6)" in failure.message, failure.message


def test_a_cause_in_one_line_has_no_memory_addresses() -> None:
    """Object reprs in an exception (``<module 'vit_pytorch' (<...NamespaceLoader object at
    0x7f6c642717d0>)>``) would make ``fxls check`` print other text on every run."""
    exc = TypeError(f"{object()!r} is a built-in module")
    assert one_line(exc) == "TypeError: <object object> is a built-in module"


def test_the_parameter_a_none_error_is_about() -> None:
    from fxls.worker.capture.failures import none_given

    to = "'NoneType' object has no attribute 'to'"
    names = ["guidance", "timestep", "ids"]
    # the one whose attribute the error names, among several the code reads
    assert none_given(to, "timestep.to(x.dtype) * guidance", names) == "timestep"
    # one read, whatever the error's words
    added = "unsupported operand type(s) for +: 'NoneType' and 'int'"
    assert none_given(added, "ids + 1", names) == "ids"
    # several read and none named by the error: not guessed
    assert none_given(added, "ids + guidance", names) is None
    # a name inside another, an attribute of something else, another error: none
    assert none_given(to, "self.timestep.to(x)", names) is None
    assert none_given(to, "timesteps.to(x)", names) is None
    assert none_given("'Tensor' object has no attribute 'to'", "timestep.to(x)", names) is None


TWO_CLASSES = """
import torch.nn as nn


class Fine(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


class Unlucky(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)
"""


def test_a_capture_stopped_by_an_unexpected_error_says_what_and_where(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An exception no strategy handles (a bug in fxls's own code, injected here) leaves the
    class failed with FX511 naming the exception and where it was raised, on the ``class``
    line, and the traceback in ``error``; the other classes are captured as usual."""
    import fxls.worker.capture.pipeline as pipeline

    real = pipeline.capture_class

    def capture_class(doc, req, *args, **kwargs):  # type: ignore[no-untyped-def]
        if req.name == "Unlucky":
            raise TypeError("first argument must be string or compiled pattern")
        return real(doc, req, *args, **kwargs)

    monkeypatch.setattr(pipeline, "capture_class", capture_class)
    lines = TWO_CLASSES.splitlines()
    requests = [
        ClassRequest(name, next(i for i, t in enumerate(lines, 1) if t.startswith(f"class {name}")))
        for name in ("Fine", "Unlucky")
    ]
    job = CaptureJob(path="/virtual/two.py", source=TWO_CLASSES, classes=requests)
    result = run_capture(job, lambda phase, name: None)
    fine, unlucky = result.modules

    assert fine.status == "traced" and fine.outputs[0].shape == ["B", 4]
    assert unlucky.status == "failed"
    [found] = unlucky.diagnostics
    assert found.code == "FX511" and found.severity == "warning"
    assert found.message.startswith(
        "capturing `Unlucky` stopped on an unexpected error: TypeError: first argument must "
        "be string or compiled pattern (raised in capture/test_failures.py:"
    ), found.message
    assert ", from fxls/worker/capture/pipeline.py:" in found.message, found.message
    assert found.span.line == requests[1].line
    assert unlucky.error is not None and "capture_class" in unlucky.error.traceback
