"""FX405 / FX408: pin what fxls assumed as ``# fxls:`` directives above the class; FX402:
declare an input left at its default ``None`` that the code needs, with the suggested shape.

``init``: the constructor arguments of the build fxls chose (``Construction.pin``), as
``# fxls: init(...)``. ``input``: an assumed ``forward`` input with the sizes the capture ran
with (``# fxls: x = (B=2, 3, 224, 224)``, a dtype when not float32), or a plain value
(``# fxls: start_pos = 0``). ``declare``: ``# fxls: timestep = (B,) int64``, the shape FX402
suggested for a parameter left at ``None``. Directives change only how fxls captures, never
what the module computes, so they are verified by capturing the edited file: it must run as
far with the same shapes, without the assumption.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from fxls.protocol.model import ClassRequest, DimSpec, FixRequest, InputSpec
from fxls.worker.capture.build import inputs
from fxls.worker.rewrite import text
from fxls.worker.rewrite.base import Original, Proposal, Unavailable, gone_of


def propose(original: Original, fix: FixRequest) -> Proposal:
    what = fix.params.get("what")
    if what == "init":
        pin = init_args(original, fix.cls)
        body = f"init({pin})"
        title = f"Pin the constructor arguments: `# fxls: {body}`"
        gone = gone_of(fix, "FX408")

        def update(req: ClassRequest) -> None:
            req.init, req.init_line = pin, None

    elif what in ("input", "declare"):
        arg = str(fix.params.get("arg", ""))
        if what == "input":
            body, spec = input_directive(original, fix.cls, arg)
            title, gone = f"Pin the assumed input: `# fxls: {body}`", gone_of(fix, "FX405")
        else:
            body, spec = declared(arg, str(fix.params.get("shape", "")))
            title, gone = f"Declare the input: `# fxls: {body}`", gone_of(fix, "FX402")

        def update(req: ClassRequest) -> None:
            req.inputs = [s for s in req.inputs if s.name != spec.name] + [spec]

    else:
        raise Unavailable(f"unknown directive {what!r}")
    edit = text.insert_directives(original.doc.source, original.tree, fix.cls, [body])
    return Proposal(title, [edit], check="capture", gone=gone, requests={fix.cls: update})


_SHAPE = re.compile(r"\(([\w, ]{0,120})\)(?: (\w{1,20}))?", re.ASCII)
"""A suggested shape as FX402 words it: ``(B, T) int64``, ``(B,)``, ``(B, 3, 224, 224)``."""


def declared(arg: str, shape: str) -> tuple[str, InputSpec]:
    """``timestep = (B,) int64`` for the shape FX402 suggested, and the InputSpec the server's
    directive parser reads from it."""
    found = _SHAPE.fullmatch(shape)
    if not (arg.isidentifier() and arg.isascii()) or len(arg) > 80 or found is None:
        raise Unavailable(f"`{arg[:40]}` cannot be declared as {shape[:40]!r}")
    names = [d.strip() for d in found.group(1).split(",") if d.strip()]
    if not names or not all(d.isdigit() or d.isidentifier() for d in names):
        raise Unavailable(f"`{arg}` cannot be declared as {shape[:40]!r}")
    dims = [DimSpec(size=int(d)) if d.isdigit() else DimSpec(name=d) for d in names]
    dtype = found.group(2)
    if dtype is not None and not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise Unavailable(f"`{dtype}` is not a torch dtype")
    return f"{arg} = {shape}", InputSpec(name=arg, kind="shape", dims=dims, dtype=dtype)


def init_args(original: Original, cls: str) -> str:
    """The argument text of ``# fxls: init(...)`` for the build fxls chose."""
    how = original.module(cls).constructed
    if how is None or how.pin is None:
        raise Unavailable("the arguments fxls built it with cannot be written as `init(...)`")
    return how.pin


def input_directive(original: Original, cls: str, arg: str) -> tuple[str, InputSpec]:
    """``x = (B=2, 3, 224, 224)`` for the input the capture ran with, and the InputSpec the
    server's directive parser reads from it."""
    capture = original.capture(cls)
    planned = next((p for p in capture.feeds_planned if p.name == arg), None)
    if planned is None:
        raise Unavailable(f"fxls did not settle an input `{arg}`")
    if planned.kind == "tensor":
        dims = ", ".join(f"{name}={size}" if name else str(size) for name, size in planned.dims)
        if len(planned.dims) == 1:
            dims += ","
        dtype = None if planned.dtype == torch.float32 else inputs.dtype_name(planned.dtype)
        body = f"{arg} = ({dims})" + (f" {dtype}" if dtype else "")
        spec = InputSpec(
            name=arg, kind="shape", dims=[DimSpec(n, s) for n, s in planned.dims], dtype=dtype
        )
        return body, spec
    return value_directive(arg, planned.value)


def value_directive(arg: str, value: Any) -> tuple[str, InputSpec]:
    """``flag = False`` (or ``hidden = (torch.zeros(2, 2, 64), ...)``) and its InputSpec."""
    literal = inputs.directive_expr(value)
    if literal is None:
        raise Unavailable(f"the value fxls passed for `{arg}` cannot be written in a directive")
    return f"{arg} = {literal}", InputSpec(name=arg, kind="expr", expr=literal)
