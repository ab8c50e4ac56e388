"""The zygote's warm-up: the one module of the process side that imports torch.

It imports torch and everything a capture loads lazily (meta build, FX tracing, fake tensors,
sympy) once, so each forked child starts warm. It never runs a real tensor operation: an
OpenMP region in the zygote would hang every child forked after it.

The warm-up has four parts. :data:`FIRST`, torch and the ``preview`` job's modules, runs
before the zygote says it is ready: from then on it takes ``preview`` jobs
(:mod:`fxls.worker.capture.preview`: a run on meta tensors, which needs no ``torch._dynamo``).
:data:`BEFORE_CAPTURES`, the imports every capture needs (FX, fake tensors, the capture
package, and ``torch._dynamo`` and ``torch.export``, which ``FakeTensorMode()`` and symbolic
shapes load), runs next, one step per turn of the zygote's loop and not while a preview job
waits or has run for less than ``PREVIEW_WAIT_S``; jobs of the other kinds wait in the queue until it is done (a child forked
without them would import them itself, one after the other: nothing is gained by forking it
earlier). :data:`LATER` (exercising the meta build, FX, fake tensors and symbolic shapes, then
one whole capture: caches and the last lazy imports) runs while the first job's child works,
or once the zygote is idle, so the first job never waits for it. A child forked before
``LATER`` finished does that work itself; the ones after start warm. :data:`QUIET` (captures of
a small transformer and a small CNN: the first use of common operators with symbolic sizes,
which every job child would otherwise pay again) runs last, only while no job runs.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable

from fxls.protocol.model import CaptureJob, CaptureResult, ClassRequest, DimSpec, InputSpec

Step = tuple[str, Callable[[], object]]


def _import_torch() -> None:
    import torch

    torch.set_num_threads(1)
    unheard_traces()


def unheard_traces() -> None:
    """Take torch's structured-trace handler off its trace log unless ``TORCH_TRACE`` names a
    folder for the traces. Without one the handler writes nothing, but while the log has a
    handler every symbol and guard a ``ShapeEnv`` makes first builds its record: the user's
    and torch's stacks, read from the source files (2–3 ms of a 4-block GPT's 60 ms capture,
    and 55% of a vision model's whose run makes thousands of unbacked floats)."""
    if os.environ.get("TORCH_TRACE"):
        return
    try:  # torch's private logging module: another torch may lack it; then nothing changes
        from torch._logging import _internal

        log, kind = _internal.trace_log, _internal.LazyTraceHandler
    except (ImportError, AttributeError):
        return
    for handler in list(log.handlers):
        if isinstance(handler, kind):
            log.removeHandler(handler)


def _import_preview() -> None:
    import fxls.worker.capture.preview
    import fxls.worker.jobs  # noqa: F401


def _import_fx() -> None:
    import torch.fx  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: F401
    from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: F401
    from torch.fx.passes.shape_prop import ShapeProp  # noqa: F401


def _import_capture() -> None:
    import fxls.worker.jobs  # noqa: F401 - imported once here instead of in every child
    from fxls.worker.capture.build import instances as build
    from fxls.worker.capture.trace import reuse

    build.find_torch_resets()
    reuse.fast_path_agrees()  # once, not in every child that copies a block


def _import_dynamo() -> None:
    """torch._dynamo: loaded by the parameter initializers on the meta device and by the
    validator of symbolic shapes, i.e. by every capture."""
    import torch._dynamo  # noqa: F401


def _import_export() -> None:
    """torch.export: loaded by symbolic shapes."""
    import torch.export._trace  # noqa: F401


def _meta_trace() -> None:
    """Build on the meta device (loads torch._dynamo through the parameter initializers),
    trace, and propagate fake tensors."""
    import torch
    import torch.fx
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.fx.passes.shape_prop import ShapeProp

    with torch.device("meta"):
        module = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 4))
    graph_module = torch.fx.symbolic_trace(module)
    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    with mode:
        tokens = torch.empty(2, 3, dtype=torch.long)
    ShapeProp(graph_module, fake_mode=mode).propagate(tokens)


def _shapes() -> None:
    from fxls.worker.capture.shapes import propagation as shapes

    shapes.warm_up()


_WARM_SOURCE = """\
import torch
from torch import nn


class Warm(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.lin(self.emb(x))).sum(-1)
"""

_WARM_TRANSFORMER = """\
import math

import torch
import torch.nn.functional as F
from torch import nn


class Norm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Attention(nn.Module):
    def __init__(self, dim, heads, block):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        y = y + F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, dim, heads, block):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, block)
        self.ln_2 = Norm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.gate = nn.Linear(dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = self.ln_2(x)
        return x + self.mlp(h) * F.silu(self.gate(h))


class Model(nn.Module):
    def __init__(self, vocab=64, dim=768, heads=12, block=1024, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(block, dim)
        self.h = nn.ModuleList([Block(dim, heads, block) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos).unsqueeze(0)
        for block in self.h:
            x = block(x)
        x = torch.cat([x[:, :1], x[:, 1:]], dim=1)
        return self.head(self.ln_f(x))
"""

_WARM_CNN = """\
import torch
import torch.nn.functional as F
from torch import nn


class Stage(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.down(x))


class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.stages = nn.Sequential(Stage(8, 16, 2), Stage(16, 16, 1))
        self.avg = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.stages(self.pool(self.stem(x)))
        return self.fc(torch.flatten(self.avg(x), 1)).log_softmax(dim=-1)
"""


def _capture(source: str, requests: list[ClassRequest]) -> CaptureResult:
    from fxls.worker.capture.pipeline import run_capture

    job = CaptureJob(path="<fxls-warm-up>", source=source, classes=requests)
    return run_capture(job, lambda phase, name: None)


def _line_of(source: str, name: str) -> int:
    return next(i for i, t in enumerate(source.split("\n"), 1) if t.startswith(f"class {name}("))


def _warm_capture() -> CaptureResult:
    """One capture of a tiny module (meta build, symbolic shapes) so that every module the
    capture imports lazily is loaded before ``gc.freeze`` and shared by all children."""
    tokens = InputSpec("x", dims=[DimSpec("B", 2), DimSpec(None, 3)], dtype="int64")
    return _capture(
        _WARM_SOURCE, [ClassRequest("Warm", line=_line_of(_WARM_SOURCE, "Warm"), inputs=[tokens])]
    )


def warm_transformer() -> CaptureResult:
    """A small decoder and its classes captured as a user file would be (the blocks from the
    instance the model calls): the first use of the usual operators (attention, norms, MLPs)
    with symbolic ``B``/``T`` then costs each job child less (a 2-block GPT file: 440 ms ->
    350-390 ms, measured).

    A child's ``ShapeEnv`` names the symbols of its inputs' sizes as this one does (torch
    derives a symbol's number from its source's name), so the sympy expressions built here
    (``T**2``, ``768*T``, ``T <= 1024``) and the facts sympy deduced about them are shared by
    every child forked after it: the decoder has GPT-2 small's width (768, 12 heads) and
    context (1024), the most common ones. The root's symbolic run of a 4-block GPT of that
    width: 56 -> 43 ms (the context alone: 56 -> 49 ms); of a 512-wide one with a context of 256:
    58 -> 56 ms (measured in forked children)."""
    src = _WARM_TRANSFORMER
    tokens = InputSpec("idx", dims=[DimSpec("B", 2), DimSpec("T", 8)], dtype="int64")
    names = ("Model", "Block", "Attention", "Norm")
    return _capture(
        src,
        [
            ClassRequest(n, line=_line_of(src, n), inputs=[tokens] if n == "Model" else [])
            for n in names
        ],
    )


_CNN_IMAGES = InputSpec("x", dims=[DimSpec("B", 2), DimSpec(None, 3), DimSpec(None, 32),
                                   DimSpec(None, 32)])  # fmt: skip
"""The input the small CNN is captured with."""


def warm_cnn() -> CaptureResult:
    """A small residual CNN and its stage: convolutions, batch norms and pooling."""
    src = _WARM_CNN
    return _capture(src, [ClassRequest("Net", line=_line_of(src, "Net"), inputs=[_CNN_IMAGES]),
                          ClassRequest("Stage", line=_line_of(src, "Stage"))])  # fmt: skip


FIRST: tuple[Step, ...] = (
    ("import torch", _import_torch),
    ("import preview", _import_preview),
)
"""Before the zygote is ready: what a ``preview`` job needs (torch imports FX and the fake
tensor classes itself; the meta run loads neither ``torch._dynamo``, ``torch.export``,
``symbolic_shapes`` nor sympy: see ``fxls.worker.capture.preview.stand_ins``)."""

BEFORE_CAPTURES: tuple[Step, ...] = (
    ("import fx and fake tensors", _import_fx),
    ("import capture", _import_capture),
    ("import torch._dynamo", _import_dynamo),
    ("import torch.export", _import_export),
)
"""After ready, before the zygote forks a job of any kind but ``preview``: what every
capture imports."""

LATER: tuple[Step, ...] = (
    ("meta build, trace, fake shapes", _meta_trace),
    ("symbolic shapes", _shapes),
    ("one capture", _warm_capture),
)
"""While the zygote is idle: what captures load lazily."""

QUIET: tuple[Step, ...] = (
    ("a small transformer", warm_transformer),
    ("a small CNN", warm_cnn),
)
"""After ``LATER``, only while no job runs: the first use of common operators (each step
keeps the zygote from reading results for up to a second)."""


def warm_spare(job_waiting: Callable[[], bool] = lambda: False, until: float | None = None) -> None:
    """In a child forked ahead of its job (the zygote's spare), before the job comes: small
    captures (:data:`SPARE_STEPS`), so that the job does not pay for its first touches of the
    zygote's memory. None after the first step that finds ``job_waiting()``; none after the
    first that could run past ``until`` (``time.monotonic()``: when the job is expected), taken
    as twice the step before it (each step is about 1.4 times the one before).

    A forked child's first writes to the pages it shares with the zygote (reference counts of
    the functions and objects a capture uses, the allocator's free lists) each copy a page:
    a ResNet-50 file's capture made about 4,000 such faults and took 70 ms in a fresh child,
    53 ms run a second time in the same child. After the tiny capture (about 30 ms, while the
    spare waits) the same capture made about 1,000 and took 57 ms; after the small CNN and
    the decoder block as well (about 100 ms more), 51 ms, and a 4-block GPT file's 80 -> 72 ms.
    The zygote ran the same captures in its warm-up (``LATER``, ``QUIET``), so the child's
    state is what it was, pages aside."""
    last = 0.0
    for step in SPARE_STEPS:
        now = time.monotonic()
        if job_waiting() or (last and until is not None and now + 2 * last > until):
            return
        try:
            step()
        except Exception:
            traceback.print_exc()
        last = time.monotonic() - now


def _spare_cnn() -> CaptureResult:
    """The small CNN of :func:`warm_cnn`, its model only."""
    return _capture(
        _WARM_CNN, [ClassRequest("Net", line=_line_of(_WARM_CNN, "Net"), inputs=[_CNN_IMAGES])]
    )


def _spare_block() -> CaptureResult:
    """A decoder block of :func:`warm_transformer`, given its input (``[B, T, 768]``)."""
    x = InputSpec("x", dims=[DimSpec("B", 2), DimSpec("T", 8), DimSpec(None, 768)])
    src = _WARM_TRANSFORMER
    request = ClassRequest("Block", line=_line_of(src, "Block"), init="768, 12, 1024", inputs=[x])
    return _capture(src, [request])


SPARE_STEPS: tuple[Callable[[], CaptureResult], ...] = (_warm_capture, _spare_cnn, _spare_block)
"""What a spare child captures while it waits for its job, in order."""


def run_step(step: Step, timings: dict[str, float]) -> None:
    """Run one warm-up step and record its wall time (seconds) under its name; a failing
    ``LATER`` step is printed and skipped (its work is then done by each child)."""
    name, call = step
    started = time.monotonic()
    try:
        call()
    except Exception:
        traceback.print_exc()
    finally:
        timings[name] = round(time.monotonic() - started, 3)


def warm_up(timings: dict[str, float] | None = None) -> str:
    """Run the :data:`FIRST` steps (errors propagate: no torch, no worker); returns the torch
    version. Never runs a real tensor operation."""
    timings = {} if timings is None else timings
    for name, call in FIRST:
        started = time.monotonic()
        call()
        timings[name] = round(time.monotonic() - started, 3)
    import torch

    return str(torch.__version__)


def finish() -> None:
    """After the :data:`LATER` steps: one thread again (a step may have changed it)."""
    import torch

    torch.set_num_threads(1)


def warm_all(timings: dict[str, float] | None = None) -> str:
    """Every step, :data:`FIRST`, :data:`BEFORE_CAPTURES`, :data:`LATER` and :data:`QUIET` (for
    tools and tests)."""
    timings = {} if timings is None else timings
    version = warm_up(timings)
    for step in BEFORE_CAPTURES + LATER + QUIET:
        run_step(step, timings)
    finish()
    return version
