"""Building a module class: on the meta device first, on the CPU when ``__init__`` needs real
values (FX406), with FX401 at the constructor call or the class when it cannot be built."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from fxls.protocol import catalogue as m
from fxls.protocol.model import ClassRequest, Diagnostic, ModuleResult, Related, Span
from fxls.worker.capture.document import Document
from fxls.worker.capture.reporting import error_info, line_span, one_line, user_span


def build(
    doc: Document, req: ClassRequest, cls: type, mod: ModuleResult, class_span: Span
) -> nn.Module | None:
    """Build ``cls`` as ``req`` says; records ``mod.build`` and diagnostics on the way."""

    def construct() -> Any:
        if req.init and req.init.strip():
            return eval(f"_fxls_class({req.init})", doc.namespace, {"_fxls_class": cls})
        return cls()

    meta_error: BaseException | None = None
    if doc.job.meta_init:
        try:
            with torch.device("meta"):
                module = construct()
            mod.build = "meta"
            return _checked(module, req, mod, class_span)
        except BaseException as exc:
            meta_error = exc
            if isinstance(exc, SystemExit):
                mod.error = error_info("init", exc)
                mod.diagnostics.append(_build_failed(doc, req, cls, exc, class_span))
                return None
    try:
        module = construct()
    except BaseException as exc:
        mod.error = error_info("init", exc)
        mod.diagnostics.append(_build_failed(doc, req, cls, exc, class_span))
        return None
    mod.build = "cpu"
    if meta_error is not None:
        mod.diagnostics.append(
            m.FX406(class_span, cls=req.name, error=one_line(meta_error)).diagnostic()
        )
    return _checked(module, req, mod, class_span)


def _checked(
    module: Any, req: ClassRequest, mod: ModuleResult, class_span: Span
) -> nn.Module | None:
    if not isinstance(module, nn.Module):
        mod.diagnostics.append(
            m.FX401(
                class_span,
                cls=req.name,
                error=f"the constructor returned {type(module).__name__}",
                example="...",
            ).diagnostic()
        )
        return None
    return module.eval()


def _build_failed(
    doc: Document, req: ClassRequest, cls: type, exc: BaseException, class_span: Span
) -> Diagnostic:
    example = init_example(cls)
    span = class_span
    if req.init and req.init_line:
        span = line_span(doc.source, req.init_line)
    related = []
    inner = user_span(exc, doc.path, doc.source)
    if inner is not None and inner != span:
        related.append(Related(inner, f"raised here: {one_line(exc)}"))
    return m.FX401(span, related, cls=req.name, error=one_line(exc), example=example).diagnostic(
        {"example": example}
    )


def init_example(cls: type) -> str:
    """``dim=..., heads=...`` for the required constructor parameters."""
    try:
        sig = inspect.signature(cls.__init__)  # type: ignore[misc]
    except (TypeError, ValueError):
        return "..."
    required = [
        f"{p.name}=..."
        for p in list(sig.parameters.values())[1:]
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    return ", ".join(required) or "..."
