"""Building a module class: the directive's arguments, or recipes from ``construct``.

Each build is tried on the meta device first (no real memory) and again on the CPU when
``__init__`` needs real values (FX406). ``candidates`` yields every instance that builds, best
recipe first, so the capture can move on to the next one when an assumed build does not run.
When nothing builds, FX401 says why: an error for a directive's arguments (the user asked for
them), information otherwise (fxls only tried).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import sys
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._device import DeviceContext, _device_constructors

from fxls.protocol import catalogue
from fxls.protocol.model import (
    ClassRequest,
    Construction,
    Diagnostic,
    ModuleResult,
    Related,
    Span,
)
from fxls.worker.capture import cpulimit
from fxls.worker.capture.build import construct, repeats
from fxls.worker.capture.document import ExecutedDocument
from fxls.worker.capture.reporting import error_info, line_span, one_line, user_span

_META_HINTS = ("meta", "item()", "is not implemented for", "NotImplementedError", "data_ptr")


@dataclass
class Built:
    module: nn.Module
    device: str
    """``meta`` or ``cpu``."""
    construction: Construction
    meta_error: BaseException | None = None
    """Why the meta build failed when the CPU build was used."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments by name, when known (for sizes the build names)."""
    notes: list[str] = field(default_factory=list)
    """What the recipe says about the build (a smaller configuration), for the hover."""
    default_make: Callable[[], Any] | None = None
    """For a meta build with fewer layers than the default configuration's: what builds the
    default (:func:`at_default_depth`)."""


def candidates(
    doc: ExecutedDocument, req: ClassRequest, cls: type, mod: ModuleResult, class_span: Span
) -> Iterator[Built]:
    """Instances of ``cls`` as ``req`` says, or by the recipes of ``construct`` (in order).

    When none builds, ``mod`` gets FX401 and ``mod.error``.
    """
    if req.init and req.init.strip():
        init = req.init

        def from_directive() -> Any:
            return eval(f"_fxls_class({init})", doc.namespace, {"_fxls_class": cls})

        text = f"{cls.__name__}({init})"
        how = Construction("directive", text, pin=init, expr=text)
        built, error = _build(doc, from_directive, how)
        if built is not None:
            yield built
        elif error is not None:
            mod.error = error_info("init", error)
            mod.diagnostics.append(_build_failed(doc, req, cls, error, class_span, "error"))
        return

    first_error: BaseException | None = None
    failed: list[tuple[construct.Recipe, BaseException | None]] = []
    tried = built_any = 0
    for recipe in construct.recipes(doc, cls, req.call_sites):
        tried += 1
        if tried > construct.MAX_RECIPES:
            break
        built, error = _from_recipe(doc, cls, recipe)
        if built is not None:
            built_any += 1
            yield built
            continue
        if isinstance(error, SystemExit):
            mod.error = error_info("init", error)
            mod.diagnostics.append(_build_failed(doc, req, cls, error, class_span, "information"))
            return
        first_error = first_error or error
        failed.append((recipe, error))
    if built_any:
        return
    for built in _repaired(doc, cls, failed):
        yield built
        return
    if first_error is not None:
        mod.error = error_info("init", first_error)
    error = first_error or TypeError("fxls found no way to call its constructor")
    mod.diagnostics.append(_build_failed(doc, req, cls, error, class_span, "information"))


def _repaired(
    doc: ExecutedDocument,
    cls: type,
    failed: list[tuple[construct.Recipe, BaseException | None]],
) -> Iterator[Built]:
    """When no recipe built: each failed one built again with guesses for the parameters its
    failure names (``construct.repairs``); the instances that build. Tried last, so that
    evidence in the file (a call site, a factory) is never passed over for a guess."""
    for recipe, error in failed:
        built = construct.repairs(doc, cls, recipe, error, lambda r: _from_recipe(doc, cls, r))
        if built is not None:
            yield built


def from_recipe(doc: ExecutedDocument, cls: type, recipe: construct.Recipe) -> Built | None:
    """One recipe built (meta first), or None when it raises."""
    return _from_recipe(doc, cls, recipe)[0]


def _from_recipe(
    doc: ExecutedDocument, cls: type, recipe: construct.Recipe
) -> tuple[Built | None, BaseException | None]:
    how = Construction(
        recipe.source,
        recipe.text,
        assumed=dict(recipe.assumed),
        pin=recipe.init,
        expr=recipe.expr(cls.__name__),
    )
    built, error = _build(doc, recipe.make, how)
    if built is not None:
        built.arguments = {**_defaults(cls), **recipe.kwargs}
        built.notes = list(recipe.notes)
        if built.device == "meta":
            built.default_make = recipe.default_make
    return built, error


def at_default_depth(doc: ExecutedDocument, built: Built) -> nn.Module | None:
    """``built``'s class at its default configuration's depth, on the meta device (the third
    identical layer on is a copy): only its parameters are counted (its submodules' too, for
    the classes captured as its submodules); None without ``default_make`` or when that build
    fails there."""
    if built.default_make is None:
        return None
    try:
        default, _ = _on_meta(doc, built.default_make, built.construction, schedules=False)
    except BaseException as exc:  # user code may raise anything
        cpulimit.passed_on(exc)
        return None
    return default.module if default is not None else None


def parameters(module: nn.Module | None, path: str = "") -> int | None:
    """The parameters of ``module``'s submodule at ``path`` (itself for ``""``); None when
    there is none."""
    if module is None:
        return None
    try:
        inside = module.get_submodule(path)
    except AttributeError:
        return None
    return sum(p.numel() for p in inside.parameters())


_FILLS = frozenset(
    getattr(torch.Tensor, name)
    for name in ("uniform_", "normal_", "zero_", "fill_", "bernoulli_", "exponential_",
                 "geometric_", "log_normal_", "cauchy_", "random_", "erfinv_")
)  # fmt: skip
"""In-place methods that only write values (a meta tensor has none)."""
_INITIALIZERS = frozenset({nn.init.uniform_, nn.init.normal_, nn.init.constant_})
"""``torch.nn.init`` functions that hand themselves to a torch function mode (their tensor as
the keyword ``tensor``) and then only write values: inside the mode's handler the mode is off,
so the write would run its meta kernel (0.7 ms a ``normal_``, a third of a 12-layer GPT-2
head's meta build: transformers' ``Conv1D`` calls ``nn.init.normal_``)."""
_TRIANGLES = frozenset({torch.tril, torch.triu, torch.Tensor.tril, torch.Tensor.triu})
_PLAIN = (torch.Tensor, nn.Parameter)


_SCHEDULES = frozenset({torch.linspace, torch.logspace, torch.arange})
"""Ranges of numbers that ``__init__`` code reads back (``[x.item() for x in
torch.linspace(0, drop_path_rate, depth)]``, the stochastic depth of Swin, ConvNeXt, DaViT):
made on the CPU in a second meta build when the first read a value (:func:`_reads_values`)."""
_VALUE_ERRORS = ("item() cannot be called on meta tensors", "Cannot copy out of meta tensor")

_MOVES = frozenset({torch.Tensor.cpu, torch.Tensor.cuda})
_FROM_DATA = frozenset(
    {torch.tensor, torch.as_tensor, torch.scalar_tensor, torch.Tensor.new_tensor}
)
"""Tensors made from values keep the device they name: code reads them back (``.item()`` of
``tensor.new_tensor(a, device="cpu")`` in ``trunc_normal_``)."""


def _off_meta(device: Any) -> bool:
    """Whether ``device`` names a device other than meta (``"cpu"``, ``"cuda:0"``, 0)."""
    if isinstance(device, bool) or device is None:
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, (str, torch.device)):
        try:
            return torch.device(device).type != "meta"
        except (RuntimeError, TypeError):
            return False
    return False


def _is_meta(value: Any) -> bool:
    """Whether ``value`` is a plain meta tensor or parameter."""
    return isinstance(value, torch.Tensor) and value.is_meta and type(value) in _PLAIN


def _answered(func: Any, first: Any, kwargs: dict[str, Any]) -> torch.Tensor | None:
    """What a meta build answers itself: an initializer's or a fill's own meta tensor, a new
    meta tensor for ``tril``/``triu`` of a meta matrix; None for the rest."""
    if func in _INITIALIZERS:
        tensor = kwargs.get("tensor", first)
        return tensor if _is_meta(tensor) else None
    if not _is_meta(first):
        return None
    if func in _FILLS:
        return typing.cast(torch.Tensor, first)
    if func in _TRIANGLES and first.dim() >= 2 and "out" not in kwargs:
        return torch.empty(first.shape, dtype=first.dtype, device=first.device)
    return None


class _MetaBuild(DeviceContext):
    """While ``__init__`` runs: the meta device as the default device (what ``with
    torch.device("meta")`` does, in the same mode: one Python call per torch call instead of
    two, a fifth of a ResNet-50's build), parameter initializers (``uniform_``, ``normal_``...)
    return their meta tensor at once, and ``torch.tril``/``triu`` of a meta matrix is a new
    meta tensor of its shape, instead of running their meta kernels (about a millisecond per
    causal mask of a GPT block, half of a 48-block GPT's build). Shapes and dtypes are what the
    kernels give; a device the code names (``device="cpu"``, ``.to("cuda")``, ``.cpu()``) is
    meta too."""

    def __init__(self) -> None:
        super().__init__("meta")

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        first = args[0] if args else None
        answered = _answered(func, first, kwargs)
        if answered is not None:
            return answered
        device = kwargs.get("device")
        if device is None:
            if func in _device_constructors():
                kwargs["device"] = self.device
        elif func not in _FROM_DATA and _off_meta(device):
            # ``torch.ones(..., device="cpu")``, ``nn.Linear(..., device=device)``: the build
            # stays on meta, as the user's device would hold the same shapes
            kwargs = {**kwargs, "device": "meta"}
        if isinstance(first, torch.Tensor) and first.is_meta:
            if func in _MOVES:
                return first
            if func is torch.Tensor.to:
                args = tuple("meta" if _off_meta(a) else a for a in args)
        return func(*args, **kwargs)


class _ScheduleBuild(_MetaBuild):
    """:class:`_MetaBuild`, with the ranges ``__init__`` reads back (:data:`_SCHEDULES`) made
    on the CPU, with their values."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in _SCHEDULES:
            return func(*args, **{**(kwargs or {}), "device": "cpu"})
        return super().__torch_function__(func, types, args, kwargs)


_RESETS = ("reset_parameters", "_reset_parameters")


@functools.cache
def find_torch_resets() -> tuple[tuple[type, str, Any], ...]:
    """``(class, method name, method)`` for every ``reset_parameters`` of torch's own layers
    (``torch.nn.modules``, imported with torch): methods that only write parameter and buffer
    values."""
    found = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("torch.nn.modules.") or module is None:
            continue
        for cls in list(vars(module).values()):
            if not isinstance(cls, type) or cls.__module__ != name:
                continue
            if not issubclass(cls, nn.Module):
                continue
            for method in _RESETS:
                value = vars(cls).get(method)
                if inspect.isfunction(value):
                    found.append((cls, method, value))
    return tuple(found)


def _skip(self: Any, *args: Any, **kwargs: Any) -> None:
    """A torch layer's ``reset_parameters`` during a meta build: a meta tensor has no values
    to write."""


@contextlib.contextmanager
def _values_unwritten() -> Iterator[None]:
    """While ``__init__`` runs on the meta device: torch's own layers skip
    ``reset_parameters`` (what it does to a meta tensor is nothing, at a quarter of a
    millisecond per ``Linear`` or ``Conv2d``: 55 → 24 ms for a 48-block GPT). A user's class
    that defines its own keeps it (its ``super()`` call is then the skip), and so does a torch
    layer whose method the document replaced."""
    resets = [(c, n, f) for c, n, f in find_torch_resets() if vars(c).get(n) is f]
    for cls, method, _ in resets:
        setattr(cls, method, _skip)
    try:
        yield
    finally:
        for cls, method, value in resets:
            setattr(cls, method, value)


def _build(
    doc: ExecutedDocument, make: Callable[[], Any], how: Construction
) -> tuple[Built | None, BaseException | None]:
    meta_error: BaseException | None = None
    if doc.job.meta_init:
        try:
            return _on_meta(doc, make, how, schedules=False)
        except SystemExit as exc:
            return None, exc
        except BaseException as exc:
            cpulimit.passed_on(exc)
            meta_error = exc
        if _reads_values(meta_error):
            try:
                return _on_meta(doc, make, how, schedules=True)
            except SystemExit as exc:
                return None, exc
            except BaseException as exc:
                cpulimit.passed_on(exc)
        if not _may_need_real_memory(meta_error) and how.source not in ("directive", "defaults"):
            return None, meta_error
    try:
        module = make()
    except BaseException as exc:
        cpulimit.passed_on(exc)
        return None, exc
    if not isinstance(module, nn.Module):
        return None, TypeError(f"the constructor returned {type(module).__name__}")
    return Built(evaluating(module), "cpu", how, meta_error), None


def _on_meta(
    doc: ExecutedDocument, make: Callable[[], Any], how: Construction, schedules: bool
) -> tuple[Built | None, BaseException | None]:
    """A meta build (raises what ``__init__`` raised); with ``schedules``, the ranges it reads
    back are made on the CPU (:data:`_SCHEDULES`), and what it keeps of them is moved to meta."""
    with (
        _ScheduleBuild() if schedules else _MetaBuild(),
        _values_unwritten(),
        repeats.copies_of_repeats(doc.namespace),
    ):
        module = make()
    if isinstance(module, nn.Module):
        return Built(evaluating(_all_on_meta(module)), "meta", how), None
    return None, TypeError(f"the constructor returned {type(module).__name__}")


def evaluating(module: nn.Module) -> nn.Module:
    """``module`` in eval mode. Not ``module.eval()``'s value: a class that overrides
    ``train`` without returning ``self`` (LeViT's attention clears a cache there) makes
    ``eval()`` return None."""
    module.eval()
    return module


def _reads_values(exc: BaseException) -> bool:
    """Whether a meta build failed reading a value back (``.item()``, ``.tolist()``)."""
    return any(hint in str(exc) for hint in _VALUE_ERRORS)


def _all_on_meta(module: nn.Module) -> nn.Module:
    """``module`` with the parameters and buffers a meta build left on the CPU moved to meta:
    the legacy constructor ``torch.Tensor(n)`` ignores the default device (wav2vec 2.0's
    ``masked_spec_embed``), and a CPU parameter among meta ones fails every run."""
    tensors = itertools.chain(module.parameters(), module.buffers())
    if all(t.is_meta for t in tensors):
        return module
    return module.to("meta")


def _defaults(cls: type) -> dict[str, Any]:
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in params if p.default is not p.empty}


def _may_need_real_memory(exc: BaseException) -> bool:
    """Whether a failed meta build might succeed on the CPU (values read in ``__init__``)."""
    text = f"{type(exc).__name__}: {exc}"
    return any(hint in text for hint in _META_HINTS)


def _build_failed(
    doc: ExecutedDocument,
    req: ClassRequest,
    cls: type,
    exc: BaseException,
    class_span: Span,
    severity: str,
) -> Diagnostic:
    example = init_example(cls)
    span = class_span
    if req.init and req.init_line:
        span = line_span(doc.source, req.init_line)
    related = []
    inner = user_span(exc, doc.path, doc.source)
    if inner is not None and inner != span:
        related.append(Related(inner, f"raised here: {one_line(exc)}"))
    message = catalogue.FX401(span, related, cls=req.name, error=one_line(exc), example=example)
    return message.diagnostic(
        {"example": example}, severity="error" if severity == "error" else "information"
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


def record(mod: ModuleResult, built: Built, class_span: Span) -> None:
    """What a successful build tells: device, construction, FX406/FX408."""
    mod.build = built.device
    mod.constructed = built.construction
    mod.error = None
    mod.notes.extend(built.notes)
    if built.meta_error is not None:
        mod.diagnostics.append(
            catalogue.FX406(class_span, cls=mod.name, error=one_line(built.meta_error)).diagnostic()
        )
    how = built.construction
    if how.assumed:
        assumed = ", ".join(f"{k}={v}" for k, v in how.assumed.items())
        pin = how.pin if how.pin is not None else "..."
        diag = catalogue.FX408(class_span, cls=mod.name, assumed=assumed, pin=pin)
        mod.diagnostics.append(diag.diagnostic({"assumed": dict(how.assumed), "init": how.pin}))
