"""The zygote's warm-up: the one module of the process side that imports torch.

It imports torch and everything a capture loads lazily (meta build, FX tracing, fake tensors,
sympy) once, so each forked child starts warm. It never runs a real tensor operation: an
OpenMP region in the zygote would hang every child forked after it.

The warm-up has two parts. :data:`FIRST`, the imports every capture needs (torch, FX, fake
tensors, the capture package, and ``torch._dynamo`` and ``torch.export``, which torch loads
lazily from the meta-device initializers and symbolic shapes), runs before the zygote says it
is ready. :data:`LATER` (exercising the meta build, FX, fake tensors and symbolic shapes, then
one whole capture: caches and the last lazy imports) runs while the first job's child works,
or once the zygote is idle, so the first job never waits for it. A child forked before
``LATER`` finished does that work itself; the ones after start warm.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

from fxls.protocol.model import CaptureJob, ClassRequest, DimSpec, InputSpec

Step = tuple[str, Callable[[], None]]


def _import_torch() -> None:
    import torch

    torch.set_num_threads(1)


def _import_fx() -> None:
    import torch.fx  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: F401
    from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: F401
    from torch.fx.passes.shape_prop import ShapeProp  # noqa: F401


def _import_capture() -> None:
    import fxls.worker.capture.jobs  # noqa: F401 - imported once here instead of in every child


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
    from fxls.worker.capture import shapes

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


def _warm_capture() -> None:
    """One capture of a tiny module (meta build, symbolic shapes) so that every module the
    capture imports lazily is loaded before ``gc.freeze`` and shared by all children."""
    from fxls.worker.capture.pipeline import run_capture

    request = ClassRequest(
        "Warm",
        line=5,
        inputs=[InputSpec("x", dims=[DimSpec("B", 2), DimSpec(None, 3)], dtype="int64")],
    )
    job = CaptureJob(path="<fxls-warm-up>", source=_WARM_SOURCE, classes=[request])
    run_capture(job, lambda phase, name: None)


FIRST: tuple[Step, ...] = (
    ("import torch", _import_torch),
    ("import fx and fake tensors", _import_fx),
    ("import capture", _import_capture),
    ("import torch._dynamo", _import_dynamo),
    ("import torch.export", _import_export),
)
"""Before the zygote is ready: what every capture imports (a child forked without them
imports them itself, one after the other: nothing is gained by leaving them for later)."""

LATER: tuple[Step, ...] = (
    ("meta build, trace, fake shapes", _meta_trace),
    ("symbolic shapes", _shapes),
    ("one capture", _warm_capture),
)
"""While the zygote is idle: what captures load lazily."""


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
    """Every step, :data:`FIRST` then :data:`LATER` (for tools and tests)."""
    timings = {} if timings is None else timings
    version = warm_up(timings)
    for step in LATER:
        run_step(step, timings)
    finish()
    return version
