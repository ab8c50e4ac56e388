"""FX108 on a ``forward`` whose decorator wraps it (``functools.wraps``, as transformers'
``@capture_outputs``) and takes ``**kwargs``: torch.fx traces a copy of its code, which must
still count as the root ``forward``. An ``isinstance`` on an input that is ``None`` is decided
by Python, the same way for the input fxls shows (T5Stack: ``isinstance(past_key_values,
EncoderDecoderCache)``, issue 24); one on a traced tensor still warns. In-process."""

from __future__ import annotations

import pytest

from fxls.protocol.model import CaptureJob, ClassRequest, ModuleResult, Span
from fxls.worker.capture.pipeline import run_capture

PATH = "/virtual/stack.py"
SOURCE = """import functools

import torch
from torch import nn


def passthrough(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    return wrapper


class Cache:
    def __init__(self):
        self.inner = None


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    @passthrough
    def forward(self, x, cache=None, **kwargs):
        inner = cache.inner if isinstance(cache, Cache) else cache
        self.last = inner
        return self.proj(x)


class Flexible(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    @passthrough
    def forward(self, x, cache=None, **kwargs):
        if isinstance(x, torch.Tensor):
            x = x.unsqueeze(0)
        return self.proj(x)
"""


def _line(fragment: str) -> int:
    return next(i for i, line in enumerate(SOURCE.splitlines(), 1) if fragment in line)


@pytest.fixture(scope="module")
def modules() -> dict[str, ModuleResult]:
    classes = [ClassRequest(name, _line(f"class {name}(")) for name in ("Stack", "Flexible")]
    result = run_capture(CaptureJob(path=PATH, source=SOURCE, classes=classes), lambda *_: None)
    assert result.error is None
    return {m.name: m for m in result.modules}


def test_isinstance_on_an_input_that_is_none_is_no_specialized_branch(
    modules: dict[str, ModuleResult],
) -> None:
    stack = modules["Stack"]
    assert stack.status == "traced"
    assert [d for d in stack.diagnostics if d.code == "FX108"] == []


def test_isinstance_on_a_traced_tensor_still_warns(modules: dict[str, ModuleResult]) -> None:
    fx108 = [d for d in modules["Flexible"].diagnostics if d.code == "FX108"]
    line = _line("isinstance(x, torch.Tensor)")
    col = SOURCE.splitlines()[line - 1].index("isinstance")
    assert [d.span for d in fx108] == [
        Span(line, col, line, col + len("isinstance(x, torch.Tensor)"))
    ]
