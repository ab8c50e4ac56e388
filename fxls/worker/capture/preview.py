"""The ``preview`` job: shapes at example sizes, before ``torch._dynamo`` is loaded.

A capture makes fake tensors (``FakeTensorMode()`` imports ``torch._dynamo``, ~0.7 s) and
symbols (``torch.export``, ~0.2 s). A new zygote says it takes preview jobs as soon as torch is
imported (:mod:`fxls.worker.process.warmup`), so the first shapes of a new server come from
here: the document is executed, each requested class is built on the meta device as the
capture builds it (:func:`fxls.worker.capture.build.instances.candidates`, whose parameter
initializers never run), its inputs are the declared ones or those its source and the file's
calls give, all at their example sizes, and ``forward`` runs once on meta tensors, with
stand-ins for ``torch._dynamo``, ``symbolic_shapes`` and sympy, which torch's meta kernels
import for a few answers that are plain on ints (:func:`stand_ins`). What it calls is
recorded as node records:

* a submodule called from the document's code (a forward hook on every module: the frame that
  called it, past ``torch.nn.Module``'s own frames, must be the document's), as ``call_module``
  with its path and type;
* a torch function or tensor method called from the document's code (a ``TorchFunctionMode``:
  the first frame past torch's dispatch helpers must be the document's), as ``call_function``
  or ``call_method``.

Each record carries the span of the call (the instruction's position in the document), its
call site in the root class's methods, and its outputs with concrete sizes. Nothing is
reported as a diagnostic: a class that does not build, lacks an input, or raises is left out,
and the full capture that follows says why. The engine shows the result marked preliminary
until that capture replaces it.
"""

from __future__ import annotations

import contextlib
import dis
import functools
import importlib
import inspect
import operator
import os
import sys
import types
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from fxls.protocol.model import (
    CaptureJob,
    CaptureResult,
    ClassRequest,
    InputValue,
    ModuleResult,
    NodeInfo,
    NodeOp,
    Span,
    Strategy,
    Value,
)
from fxls.worker.capture import spans
from fxls.worker.capture.build import inputs
from fxls.worker.capture.build import instances as build
from fxls.worker.capture.document import ExecutedDocument, execute, prepare
from fxls.worker.capture.records import nodes
from fxls.worker.capture.reporting import class_span

MAX_NODES = 4000
"""Records of one class past this are not kept (a deep model's first answer needs no more)."""
_TORCH = os.path.dirname(torch.__file__) + os.sep
_MODULE_FILE = os.path.normcase(inspect.getfile(nn.Module))
_HELPERS = frozenset(
    os.path.normcase(inspect.getfile(m))
    for m in (torch.overrides, torch.nn.functional, torch.functional, torch._tensor)
)
"""Files of torch that only pass a call on to its ``__torch_function__`` handling."""
_SYMBOLS = {
    "+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "@": "matmul",
    "**": "pow", "%": "mod", "&": "and_", "|": "or_", "^": "xor", "<<": "lshift",
    ">>": "rshift", "+=": "iadd", "-=": "isub", "*=": "imul", "/=": "itruediv",
    "@=": "imatmul",
}  # fmt: skip
"""Python's binary operators and the ``operator`` function FX records each as."""
_BINARY_OPS = [_SYMBOLS.get(symbol) for _, symbol in getattr(dis, "_nb_ops", [])]
_OPCODES = {
    dis.opmap.get("BINARY_OP"): "binary",
    dis.opmap.get("BINARY_SUBSCR"): "getitem",
    dis.opmap.get("COMPARE_OP"): "compare",
    dis.opmap.get("UNARY_NEGATIVE"): "neg",
}
_COMPARISONS = {
    "__eq__": "eq",
    "eq": "eq",
    "ne": "ne",
    "lt": "lt",
    "le": "le",
    "gt": "gt",
    "ge": "ge",
}


class StandIn(types.ModuleType):
    """A module torch imports on first use, in a preview child: in place of the real one until
    a name other than its ``shortcuts`` is read. Then the real module is imported and put in
    place, and every name, the shortcuts too, is the real one's from then on (also for code
    that holds this object). User code that reads the module gets the real one, at its cost."""

    def __init__(self, name: str, shortcuts: dict[str, Any], *, package: bool) -> None:
        super().__init__(name)
        self.fxls_shortcuts = shortcuts
        self.fxls_package = package
        self.fxls_real: types.ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        if self.fxls_real is None and name in self.fxls_shortcuts:
            return self.fxls_shortcuts[name]
        dunder = name.startswith("__") and name.endswith("__")
        if self.fxls_real is None and dunder and not (name == "__path__" and self.fxls_package):
            # ``from module import name`` asks for ``__path__``, ``inspect.getmodule`` for
            # every module's ``__file__``: no reason to import it (mid-way through another
            # import, that can be a circular one)
            raise AttributeError(name)
        return getattr(self.real(), name)

    def real(self) -> types.ModuleType:
        """The real module, imported now if it was not."""
        if self.fxls_real is not None:
            return self.fxls_real
        parent_name, _, child = self.__name__.rpartition(".")
        parent = sys.modules.get(parent_name) if parent_name else None
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
            if parent is not None and vars(parent).get(child) is self:
                delattr(parent, child)
        self.fxls_real = importlib.import_module(self.__name__)
        return self.fxls_real


def _not_compiled(fn: Any, recursive: bool = True, wrapping: bool = True) -> Any:
    """``torch._dynamo.disable`` where nothing is compiled: the function as it is."""
    return fn


class NoSympyObject:
    """``sympy.Basic`` while sympy is not imported: no object is one."""


_SCALARS = (bool, int, float)
_SYMBOLIC = "torch.fx.experimental.symbolic_shapes"
_BOOL = (bool,)
_ON_SCALARS: dict[str, tuple[tuple[type, ...], Callable[..., Any]]] = {
    "expect_true": (_BOOL, lambda a, skip=0: a),
    "guard_or_false": (_BOOL, lambda a: a),
    "guard_or_true": (_BOOL, lambda a: a),
    "guard_size_oblivious": (_BOOL, lambda a: a),
    "statically_known_true": (_BOOL, lambda a: a),
    "sym_and": (_BOOL, lambda x, *others: functools.reduce(operator.and_, others, x)),
    "sym_or": (_BOOL, lambda x, *others: functools.reduce(operator.or_, others, x)),
    "sym_eq": ((bool, int), lambda x, y: _equal(x, y)),
    "guard_int": ((int,), lambda a: a),
    "guarding_hint_or_throw": (_SCALARS, lambda a: a),
    "has_guarding_hint": (_SCALARS, lambda a: True),
    "is_nested_int": (_SCALARS, lambda s: False),
    "is_symbolic": (_SCALARS, lambda s: False),
}
"""Functions of ``symbolic_shapes`` that torch's meta kernels and references call, as they are
(their own first branch) on the Python scalars (and tuples of them) they take there: a meta
tensor's sizes are ints."""


def _equal(x: Any, y: Any) -> bool:
    """``sym_eq`` on ints and on tuples and lists of them (element by element)."""
    if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
        return len(x) == len(y) and all(_equal(a, b) for a, b in zip(x, y, strict=False))
    return bool(x == y)


def _plain(value: Any, types: tuple[type, ...], depth: int = 0) -> bool:
    """A value of one of ``types`` (exactly, not a subclass), or a tuple or list of them."""
    if type(value) in types:
        return True
    return (
        isinstance(value, (tuple, list))
        and depth < 2
        and all(_plain(v, types, depth + 1) for v in value)
    )


def _on_scalars(name: str, real: Callable[[], types.ModuleType]) -> Callable[..., Any]:
    """``name`` of ``symbolic_shapes``: its plain form (:data:`_ON_SCALARS`) when every
    argument is a Python scalar of the types it takes, else the function of the ``real``
    module (imported then)."""
    accepted, plain = _ON_SCALARS[name]

    def call(*args: Any, **kwargs: Any) -> Any:
        if all(_plain(a, accepted) for a in args) and set(kwargs) <= {"skip"}:
            return plain(*args, **kwargs)
        return getattr(real(), name)(*args, **kwargs)

    return call


def stand_ins() -> list[StandIn]:
    """Put :class:`StandIn` modules in place of three that torch imports on first use, in this
    (job child) process, for those not imported yet (by the document's own imports: a library
    that imports one gets the real module); returns those put in place.

    * ``torch._dynamo`` (~0.7 s): torch wraps many Python meta kernels and decompositions
      (batch norm on meta tensors, ``normal_``, every ``out_wrapper``) in
      ``torch._compile._disable_dynamo``, which imports it on the first call only to mark the
      function as not to be compiled; a process that compiles nothing needs no such mark
      (``disable`` returns the function).
    * ``torch.fx.experimental.symbolic_shapes``: ``torch._check``, called by every Python meta
      kernel, and torch's references import it for a few functions that on plain ints and
      bools are what :data:`_ON_SCALARS` says; a symbolic argument imports the real module.
    * ``sympy`` (~0.3 s, what ``symbolic_shapes`` costs): type promotion
      (``elementwise_dtypes``) imports it to ask whether an argument is a ``sympy.Basic``,
      which nothing is while sympy is not imported (:class:`NoSympyObject`).

    Any other name imports the real module, so what runs is torch's own code either way.
    """
    placed = []
    symbolic = StandIn(_SYMBOLIC, {}, package=False)
    symbolic.fxls_shortcuts = {name: _on_scalars(name, symbolic.real) for name in _ON_SCALARS}
    for stand_in in (
        StandIn("torch._dynamo", {"disable": _not_compiled}, package=True),
        symbolic,
        StandIn("sympy", {"Basic": NoSympyObject}, package=True),
    ):
        name = stand_in.__name__
        parent_name, _, child = name.rpartition(".")
        parent = sys.modules.get(parent_name) if parent_name else None
        if name in sys.modules or (parent_name and parent is None):
            continue
        sys.modules[name] = stand_in
        if parent is not None:
            setattr(parent, child, stand_in)
        placed.append(stand_in)
    return placed


def run_preview(job: CaptureJob, report_phase: Any) -> CaptureResult:
    """Execute ``job.source`` and preview each requested class (see the module's text)."""
    result = CaptureResult(torch_version=str(torch.__version__))
    doc = prepare(job)
    report_phase("import", None)
    try:
        execute(doc)
    except BaseException:  # the capture after it reports why
        return result
    stand_ins()  # after the document's own imports, which get the real modules
    for req in job.classes:
        if req.skip:
            continue
        report_phase("init", req.name)
        module = preview_class(doc, req, report_phase)
        if module is not None:
            result.modules.append(module)
    return result


def preview_class(
    doc: ExecutedDocument, req: ClassRequest, report_phase: Any
) -> ModuleResult | None:
    """``req``'s class built on meta and run once at example sizes; None when it cannot be."""
    cls = doc.namespace.get(req.name)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        return None
    span = class_span(doc.source, req.line, req.name)
    scratch = ModuleResult(name=req.name, line=req.line, status="failed")
    try:
        built = next(iter(build.candidates(doc, req, cls, scratch, span)), None)
    except Exception:
        return None
    if built is None or built.device != "meta":
        return None
    try:
        planned = plan_inputs(doc, req, built.module)
    except Exception:  # an input's expression, a call in the file: user code
        return None
    if planned is None:
        return None
    report_phase("trace", req.name)
    recorder = Recorder(doc, cls, built.module)
    try:
        with torch.no_grad(), recorder.hooks():
            args, kwargs = arguments(built.module, planned)
            output = built.module(*args, **kwargs)
    except Exception:
        return None
    mod = ModuleResult(name=req.name, line=req.line, status="traced", strategy=Strategy("meta-run"))
    build.record(mod, built, span)
    mod.inputs = [
        InputValue(p.name, p.protocol_value(), p.assumed, "assumed" if p.assumed else p.origin)
        for p in planned
    ]
    mod.outputs = values(output)
    mod.nodes = recorder.nodes
    return mod


def plan_inputs(
    doc: ExecutedDocument, req: ClassRequest, module: nn.Module
) -> list[inputs.PlannedInput] | None:
    """``forward``'s positional inputs: declared, a plain default, the file's own call, or the
    first layer the source passes it to; None when one of them is none of these."""
    try:
        params = [
            p
            for p in inputs.forward_parameters(module)
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return None
    symbols = inputs.Symbols(req.inputs)
    specs = {spec.name: spec for spec in req.inputs}
    calls: dict[str, inputs.PlannedInput] | None = None
    planned = []
    for param in params:
        found: inputs.PlannedInput | None = None
        if param.name in specs:
            try:
                found = inputs.from_spec(specs[param.name], symbols, doc.namespace)
            except inputs.InputError:
                return None
        elif inputs.keeps_default(param):
            found = inputs.PlannedInput(param.name, "value", value=param.default, origin="default")
        else:
            if calls is None:
                names = [p.name for p in params]
                calls = inputs.from_calls(doc, type(module), names, symbols)
            found = calls.get(param.name) or inputs.infer_from_source(
                module, param.name, doc.tree, symbols
            )
        if found is None:
            return None
        found.name = param.name
        planned.append(found)
    return planned


def arguments(
    module: nn.Module, planned: list[inputs.PlannedInput]
) -> tuple[list[Any], dict[str, Any]]:
    """``forward``'s arguments: positional-only ones by position, the others by name."""
    kinds = {p.name: p.kind for p in inputs.forward_parameters(module)}
    args = [example(p) for p in planned if kinds.get(p.name) == inspect.Parameter.POSITIONAL_ONLY]
    kwargs = {
        p.name: example(p)
        for p in planned
        if kinds.get(p.name) != inspect.Parameter.POSITIONAL_ONLY
    }
    return args, kwargs


def example(planned: inputs.PlannedInput) -> Any:
    """The meta tensor (or the value) ``planned`` stands for."""
    if planned.kind == "tensor":
        return torch.empty([size for _, size in planned.dims], dtype=planned.dtype, device="meta")
    return planned.value


def values(output: Any, depth: int = 0) -> list[Value]:
    """One ``Value`` per output, tuples and lists flattened in order."""
    if isinstance(output, torch.Tensor):
        return [
            Value(
                "tensor",
                shape=[int(s) for s in output.shape],
                dtype=inputs.dtype_name(output.dtype),
            )
        ]
    if isinstance(output, torch.Size):
        return [Value("size", shape=[int(s) for s in output], text=str(list(output)))]
    if isinstance(output, (tuple, list)) and depth < 2 and output:
        return [v for item in output for v in values(item, depth + 1)]
    return [inputs.value_of(output)]


class Recorder(TorchFunctionMode):
    """Records the calls the document's code makes while ``forward`` runs (module text)."""

    def __init__(self, doc: ExecutedDocument, cls: type, root: nn.Module) -> None:
        super().__init__()
        self.doc = doc
        self.root_codes = spans.method_codes(cls, doc.path)
        self.paths = {id(m): name for name, m in root.named_modules()}
        self.stack: list[str] = []
        self.nodes: list[NodeInfo] = []
        self.counts: dict[str, int] = {}

    @contextlib.contextmanager
    def hooks(self) -> Iterator[Recorder]:
        """The recorder active: global forward hooks and the function mode, removed after."""
        registry = torch.nn.modules.module
        handles = [
            registry.register_module_forward_pre_hook(lambda m, a: self.before_module(m)),
            registry.register_module_forward_hook(lambda m, a, o: self.after_module(m, o)),
        ]
        mode: Any = self
        try:
            with mode:
                yield self
        finally:
            for handle in handles:
                handle.remove()

    # -- where a call is written ------------------------------------------------------------

    def _document_frames(self, frame: FrameType | None) -> list[tuple[CodeType, int]]:
        found = []
        while frame is not None:
            if frame.f_code.co_filename == self.doc.path:
                found.append((frame.f_code, frame.f_lasti))
            frame = frame.f_back
        return found

    def _spans(self, caller: FrameType) -> tuple[Span, Span] | None:
        """The span of the call in ``caller`` (a document frame) and its call site."""
        frames = self._document_frames(caller)
        if not frames:
            return None
        here = self.doc.source.code_span(*frames[0])
        site = self.doc.source.code_span(*spans.call_site_frame(frames, self.root_codes))
        if here is None:
            return None
        return here, site or here

    def _name(self, base: str) -> str:
        base = "".join(c if c.isalnum() else "_" for c in base.rsplit(".", 1)[-1]).strip("_")
        base = base or "node"
        count = self.counts.get(base, 0)
        self.counts[base] = count + 1
        return base if count == 0 else f"{base}_{count}"

    def add(self, node: NodeInfo) -> None:
        if len(self.nodes) < MAX_NODES:
            self.nodes.append(node)

    # -- module calls -----------------------------------------------------------------------

    def before_module(self, module: nn.Module) -> None:
        self.stack.append(self.paths.get(id(module), ""))

    def after_module(self, module: nn.Module, output: Any) -> None:
        path = self.stack.pop() if self.stack else ""
        if not path or id(module) not in self.paths:
            return  # the root itself, or a module made in ``forward``
        caller: FrameType | None = sys._getframe(2)
        while caller is not None and os.path.normcase(caller.f_code.co_filename) == _MODULE_FILE:
            caller = caller.f_back
        if caller is None or caller.f_code.co_filename != self.doc.path:
            return  # called by a container or a library module: not written in the document
        where = self._spans(caller)
        if where is None:
            return
        parent = self.stack[-1] if self.stack else ""
        self.add(
            NodeInfo(
                name=self._name(path),
                op="call_module",
                target=path,
                span=where[0],
                call_site=where[1],
                outputs=values(output),
                module_type=nodes.module_text(module),
                module_path=parent,
            )
        )

    # -- torch functions and tensor methods ---------------------------------------------------

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        output = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name in ("__get__", "__set__") or len(self.nodes) >= MAX_NODES:
            return output
        caller: FrameType | None = sys._getframe(1)
        while caller is not None and (
            os.path.normcase(caller.f_code.co_filename) in _HELPERS
            or caller.f_code is _TORCH_FUNCTION_CODE
        ):
            caller = caller.f_back
        if caller is None or caller.f_code.co_filename != self.doc.path:
            return output
        where = self._spans(caller)
        if where is not None:
            op, target = _op_target(func, caller)
            self.add(
                NodeInfo(
                    name=self._name(target),
                    op=op,
                    target=target,
                    span=where[0],
                    call_site=where[1],
                    outputs=values(output),
                    module_path=self.stack[-1] if self.stack else "",
                )
            )
        return output


_TORCH_FUNCTION_CODE = Recorder.__torch_function__.__code__


def _operator(caller: FrameType, name: str) -> str | None:
    """The ``operator`` function of the instruction ``caller`` runs, when it is an operator."""
    code = caller.f_code.co_code
    at = caller.f_lasti
    if not 0 <= at < len(code) - 1:
        return None
    kind = _OPCODES.get(code[at])
    if kind == "binary":
        oparg = code[at + 1]
        return _BINARY_OPS[oparg] if oparg < len(_BINARY_OPS) else None
    if kind == "compare":
        return _COMPARISONS.get(name)
    return kind


def _op_target(func: Any, caller: FrameType) -> tuple[NodeOp, str]:
    """How FX would record ``func`` called by ``caller``'s current instruction: an operator
    written as one (``x + y``: ``operator.add``, ``x[0]``: ``operator.getitem``), ``view``
    for a tensor method, ``torch.nn.functional.relu`` for a function."""
    name = getattr(func, "__name__", str(func))
    operator_name = _operator(caller, name)
    if operator_name is not None:
        return "call_function", f"operator.{operator_name}"
    owner = getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
    qualname = getattr(func, "__qualname__", name)
    if owner is torch._C.TensorBase or qualname.startswith(("Tensor.", "TensorBase.")):
        return "call_method", name
    module = getattr(func, "__module__", None) or "torch"
    if module.startswith("torch._C"):
        module = "torch"
    return "call_function", f"{module}.{name}"
