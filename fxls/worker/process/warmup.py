"""The zygote's warm-up: the one module of the process side that imports torch.

It imports torch and everything a capture loads lazily (meta build, FX tracing, fake tensors,
sympy) once, so each forked child starts warm. It never runs a real tensor operation: an
OpenMP region in the zygote would hang every child forked after it.
"""

from __future__ import annotations

import traceback

from fxls.protocol.model import CaptureJob, ClassRequest, DimSpec, InputSpec


def warm_up() -> str:
    """Import torch and the lazily loaded machinery (meta build, fx trace, fake propagation).

    Never runs a real tensor operation: an OpenMP region in the zygote would hang every child.
    Returns the torch version.
    """
    import torch
    import torch.fx
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.fx.passes.shape_prop import ShapeProp

    import fxls.worker.capture.pipeline  # noqa: F401 - imported once here instead of in every child

    torch.set_num_threads(1)
    with torch.device("meta"):
        module = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 4))
    graph_module = torch.fx.symbolic_trace(module)
    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    with mode:
        tokens = torch.empty(2, 3, dtype=torch.long)
    ShapeProp(graph_module, fake_mode=mode).propagate(tokens)
    from fxls.worker.capture import shapes

    shapes.warm_up()
    _warm_capture()
    torch.set_num_threads(1)
    return str(torch.__version__)


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
    try:
        run_capture(job, lambda phase, name: None)
    except Exception:
        traceback.print_exc()
