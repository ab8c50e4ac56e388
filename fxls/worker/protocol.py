"""The wire contract between the fxls server and its worker.

Everything that crosses a process boundary is one of the dataclasses below, sent as a
length-prefixed JSON frame (4-byte big-endian length, then UTF-8 JSON). Never pickle: a
hostile child could run code in the reader. This module imports only the standard library,
so both the server (which never imports torch) and the worker use it.

Conventions used throughout:
- lines are 1-based, columns are 0-based *code point* offsets within the line (not UTF-8
  bytes, not UTF-16 units); the server converts to the client's position encoding.
- a dimension is an ``int`` or a ``str`` (a symbol name or expression such as ``"B"`` or
  ``"T - 1"``).
"""

from __future__ import annotations

import dataclasses
import json
import struct
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, Union

PROTOCOL_VERSION = 1

MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Largest frame either side accepts."""
MAX_RESULT_BYTES = 32 * 1024 * 1024
"""Largest result payload a child may send; larger ones become ``result_too_large``."""
MAX_ANY_DEPTH = 32
"""Deepest nesting accepted in an untyped (``Any``) field; typed fields bound the rest."""

_HEADER = struct.Struct(">I")

Dim = Union[int, str]

ResultKind = Literal[
    "ok",
    "exception",
    "system_exit",
    "recursion",
    "oom",
    "timeout",
    "cpu_limit",
    "file_size_limit",
    "killed",
    "signal",
    "exit",
    "protocol_error",
    "result_too_large",
    "cancelled",
    "worker_died",
    "sandbox_setup",
]
RESULT_KINDS: tuple[str, ...] = typing.get_args(ResultKind)

Phase = Literal["setup", "import", "init", "trace", "serialize"]
Severity = Literal["error", "warning", "information", "hint"]
ModuleStatus = Literal["traced", "partial", "failed", "skipped"]


# ---------------------------------------------------------------------------------------
# Requests (server -> worker)
# ---------------------------------------------------------------------------------------


@dataclass
class Span:
    """A source range. ``end_col`` is exclusive."""

    line: int
    col: int
    end_line: int
    end_col: int


@dataclass
class DimSpec:
    """One dimension of a declared input: a fixed size, a symbol, or a symbol with a size.

    ``(B=2, 3, T)`` parses to ``[DimSpec("B", 2), DimSpec(None, 3), DimSpec("T", None)]``.
    """

    name: str | None = None
    size: int | None = None


@dataclass
class InputSpec:
    """How to make one ``forward`` argument.

    kind ``shape``: a tensor of ``dims`` and ``dtype`` (default float32).
    kind ``expr``: a Python expression evaluated in the file's namespace; tensors it yields
    become fake/meta tensors of the same shape and dtype, anything else (``None``, ``True``)
    is passed as a concrete argument.
    """

    name: str
    kind: Literal["shape", "expr"] = "shape"
    dims: list[DimSpec] = field(default_factory=list)
    dtype: str | None = None
    expr: str | None = None
    source: Literal["directive", "annotation", "cli"] = "directive"
    line: int | None = None
    """Line of the directive or annotation that declared it, for diagnostics."""


@dataclass
class ClassRequest:
    """One ``nn.Module`` candidate class found by the server's AST pass."""

    name: str
    line: int
    init: str | None = None
    """Constructor argument text, e.g. ``config=GPTConfig(n_layer=2)``; evaluated as
    ``Class(<init>)`` in the file's namespace."""
    init_line: int | None = None
    inputs: list[InputSpec] = field(default_factory=list)
    leaf: list[str] = field(default_factory=list)
    """Submodule class names not to trace into."""
    skip: bool = False


@dataclass
class CaptureJob:
    """Capture every requested class of one document version."""

    path: str
    """The document's path; used as the code object's filename and for linecache."""
    source: str
    """The document text (the editor buffer, not the file on disk)."""
    classes: list[ClassRequest] = field(default_factory=list)
    sys_path: list[str] = field(default_factory=list)
    """Prepended to sys.path: the file's folder and the workspace root."""
    meta_init: bool = True
    """Build modules on the meta device (no real memory); fall back to CPU if that fails."""
    symbolic: bool = True
    """Keep user-named dimensions symbolic (fake tensors + ShapeEnv)."""


@dataclass
class Limits:
    timeout_s: float = 10.0
    cpu_s: float = 12.0
    """Soft RLIMIT_CPU; the hard limit is two seconds more."""
    memory_mb: int = 2048
    """Address space the job may add on top of the zygote's size at fork."""
    file_size_mb: int = 64
    nofile: int = 256


@dataclass
class Isolation:
    seccomp: bool = True
    landlock: bool = True
    netns: bool = False
    """Private network namespace (user+net); often unavailable to unprivileged users."""


@dataclass
class JobRequest:
    id: int
    capture: CaptureJob
    limits: Limits = field(default_factory=Limits)
    isolation: Isolation = field(default_factory=Isolation)


# ---------------------------------------------------------------------------------------
# Results (worker -> server)
# ---------------------------------------------------------------------------------------


@dataclass
class Value:
    """What a node produces (or an input is): a tensor's shape and dtype, or another value.

    kind: ``tensor`` (shape, dtype set), ``size`` (a torch.Size: shape set, text like
    ``"[B, 3, 224, 224]"``), ``int``/``float``/``bool`` (text holds the value,
    symbolic ints print as the user's names), ``none``, ``device``, ``dtype``, ``other``.
    """

    kind: str = "tensor"
    shape: list[Dim] | None = None
    dtype: str | None = None
    text: str | None = None
    """Readable form for non-tensors, e.g. ``"T"``, ``"3"``, ``"torch.float32"``."""


@dataclass
class Arg:
    """One named parameter of a call node."""

    name: str
    value: str
    """Source-like text: a node name (``conv1``), a literal (``(2, 2)``), ``None``."""
    default: bool = False
    """True when the call did not pass it and the signature's default applies."""
    node: str | None = None
    """Name of the node whose output is the value, when it is exactly one node."""
    kind: str = "positional_or_keyword"
    """inspect.Parameter kind name, lower-case (``var_positional`` for ``*args``)."""


@dataclass
class NodeInfo:
    name: str
    op: str
    """placeholder, get_attr, call_function, call_method, call_module, output."""
    target: str
    """Readable target: ``conv1``, ``torch.nn.functional.relu``, ``view``, ``operator.add``."""
    span: Span | None = None
    """Where the operation is written (innermost user frame)."""
    call_site: Span | None = None
    """Where the root ``forward`` calls into it (outermost user frame); equals span when the
    node is written in ``forward`` itself."""
    args: list[Arg] = field(default_factory=list)
    signature: str | None = None
    """Where the parameter names come from: ``module.forward``, ``python``, ``aten``,
    ``normalized``, ``approximate``."""
    outputs: list[Value] = field(default_factory=list)
    """One entry per output; tuples are flattened in order."""
    module_type: str | None = None
    """For call_module: the submodule's class and its ``extra_repr`` (``Conv2d(3, 64, ...)``)."""
    module_path: str | None = None
    """Qualified name of the module instance the node belongs to (from nn_module_stack)."""
    users: int = 0


@dataclass
class Related:
    span: Span
    message: str


@dataclass
class Diagnostic:
    code: str
    """Stable code ``FXnnn``; see docs/diagnostics.md."""
    severity: Severity
    message: str
    span: Span
    fix: str | None = None
    """Plain-language fix."""
    related: list[Related] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    """Machine-readable details for code actions."""


@dataclass
class ErrorInfo:
    """An exception caught inside the child for one module (or the file)."""

    kind: str
    """``exception``, ``system_exit`` or ``recursion``."""
    phase: Phase
    type: str
    message: str
    traceback: str = ""


@dataclass
class ModuleResult:
    name: str
    line: int
    status: ModuleStatus
    capture: str = "none"
    """``fx``, ``fx+leaf``, ``fx+wrap``, ``fx+concrete``, ``fake-run``, ``none``."""
    build: str | None = None
    """``meta`` or ``cpu`` (when ``__init__`` needed real values)."""
    params: int | None = None
    buffers: int | None = None
    inputs: list[Value] = field(default_factory=list)
    input_names: list[str] = field(default_factory=list)
    inputs_assumed: list[bool] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    nodes: list[NodeInfo] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: ErrorInfo | None = None
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class CaptureResult:
    modules: list[ModuleResult] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    """File-level diagnostics (import failures, bad directives not tied to a class)."""
    error: ErrorInfo | None = None
    """Set when the file itself failed to execute (phase ``import``)."""
    torch_version: str | None = None


@dataclass
class JobResult:
    id: int
    kind: ResultKind
    phase: Phase | None = None
    """Last phase the child reported before the outcome (for timeouts and crashes too)."""
    current_class: str | None = None
    """Class being captured when the child stopped, when known."""
    message: str = ""
    exit_code: int | None = None
    signal: int | None = None
    output_head: str = ""
    """First 64 KiB of what the child wrote to stdout/stderr (fd level)."""
    output_bytes: int = 0
    isolation: list[str] = field(default_factory=list)
    """Isolation layers that were active: ``seccomp``, ``landlock``, ``setsid``, ``rlimits``..."""
    duration_s: float = 0.0
    max_rss_kb: int = 0
    payload: CaptureResult | None = None


# Frames on the control channel ---------------------------------------------------------
# server -> zygote: {"type": "job", "job": JobRequest} | {"type": "cancel", "id": n}
#                   | {"type": "ping", "id": n} | {"type": "shutdown"}
# zygote -> server: {"type": "ready", ...ReadyInfo} | {"type": "result", "result": JobResult}
#                   | {"type": "pong", "id": n} | {"type": "log", "message": str}
# child -> zygote (fd 3): {"type": "phase", "phase": Phase, "class": str | None} ...,
#                   then exactly one {"type": "result", "payload": CaptureResult}


@dataclass
class ReadyInfo:
    pid: int
    python: str
    torch_version: str
    isolation_available: list[str] = field(default_factory=list)
    isolation_missing: dict[str, str] = field(default_factory=dict)
    """Layer name -> why it is unavailable on this machine."""
    warm_s: float = 0.0


# ---------------------------------------------------------------------------------------
# (De)serialization
# ---------------------------------------------------------------------------------------

T = TypeVar("T")


_SCALARS = (str, int, float, bool, type(None))
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def to_dict(obj: Any) -> Any:
    """Dataclass tree -> JSON-ready dict (recursively).

    Results of large models hold tens of thousands of dataclasses, so field names are looked up
    once per class and scalars return first.
    """
    if isinstance(obj, _SCALARS):
        return obj
    cls = type(obj)
    names = _FIELD_NAMES.get(cls)
    if names is None and dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(obj))
    if names is not None:
        return {name: to_dict(getattr(obj, name)) for name in names}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


class ProtocolError(ValueError):
    """A frame or object that does not match the contract."""


_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS_CACHE.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
        _HINTS_CACHE[cls] = hints
    return hints


Converter = typing.Callable[[Any], Any]
_CONVERTERS: dict[Any, Converter] = {}


class _FieldError(ProtocolError):
    """A conversion error; ``path`` is filled in on the way out, so the hot path builds no text."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def at(self, segment: str) -> _FieldError:
        return _FieldError(self.message, segment + self.path)

    def __str__(self) -> str:
        return f"{self.path.lstrip('.')}: {self.message}" if self.path else self.message


def _converter(tp: Any) -> Converter:
    """A checking converter for type ``tp``, built once per type and cached."""
    conv = _CONVERTERS.get(tp)
    if conv is None:
        conv = _build_converter(tp)
        _CONVERTERS[tp] = conv
    return conv


def _any_value(value: Any) -> Any:
    """An untyped field: any JSON value, nested at most ``MAX_ANY_DEPTH`` levels.

    A result frame can come from hostile code; without a bound a deep value passes here and
    fails later, when it is encoded again or decoded by the server.
    """
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth >= MAX_ANY_DEPTH:
                raise _FieldError(f"nested deeper than {MAX_ANY_DEPTH} levels")
            stack.extend(
                (v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return value


def _build_converter(tp: Any) -> Converter:
    origin = typing.get_origin(tp)
    if tp is Any:
        return _any_value
    if origin in (Union, types.UnionType):
        options = [o for o in typing.get_args(tp) if o is not type(None)]
        nullable = len(options) < len(typing.get_args(tp))
        option_convs = [_converter(o) for o in options]
        if len(option_convs) == 1:
            (only,) = option_convs

            def optional(value: Any) -> Any:
                return None if value is None and nullable else only(value)

            return optional

        def union(value: Any) -> Any:
            if value is None and nullable:
                return None
            errors = []
            for conv in option_convs:
                try:
                    return conv(value)
                except _FieldError as exc:
                    errors.append(str(exc))
            raise _FieldError(f"{value!r:.80} matches no option ({'; '.join(errors)})")

        return union
    if origin is Literal:
        allowed = typing.get_args(tp)

        def literal(value: Any) -> Any:
            if value not in allowed:
                raise _FieldError(f"{value!r:.80} is not one of {allowed}")
            return value

        return literal
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        item = _converter(item_tp)

        def as_list(value: Any) -> Any:
            if not isinstance(value, list):
                raise _FieldError(f"expected a list, got {type(value).__name__}")
            out = []
            for i, v in enumerate(value):
                try:
                    out.append(item(v))
                except _FieldError as exc:
                    raise exc.at(f"[{i}]") from None
            return out

        return as_list
    if origin is dict:
        _, val_tp = typing.get_args(tp) or (str, Any)
        val = _converter(val_tp)

        def as_dict(value: Any) -> Any:
            if not isinstance(value, dict):
                raise _FieldError(f"expected an object, got {type(value).__name__}")
            out = {}
            for k, v in value.items():
                try:
                    out[str(k)] = val(v)
                except _FieldError as exc:
                    raise exc.at(f".{k}") from None
            return out

        return as_dict
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_converter(tp)
    if tp is float:

        def as_float(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _FieldError(f"expected a number, got {value!r:.80}")
            return float(value)

        return as_float
    if tp is int:

        def as_int(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _FieldError(f"expected an int, got {value!r:.80}")
            return value

        return as_int
    if tp in (str, bool):

        def exact(value: Any) -> Any:
            if not isinstance(value, tp):
                raise _FieldError(f"expected {tp.__name__}, got {value!r:.80}")
            return value

        return exact
    return lambda value: value


def _dataclass_converter(cls: type) -> Converter:
    hints = _hints(cls)
    fields = []
    required = []
    for f in dataclasses.fields(cls):
        fields.append((f.name, f"{f.name}"))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    # Field converters are looked up lazily: dataclasses may refer to each other.
    convs: dict[str, Converter] = {}

    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _FieldError(f"expected an object, got {type(value).__name__}")
        if not convs:
            convs.update({name: _converter(hints[name]) for name, _ in fields})
        kwargs = {}
        for name, _ in fields:
            if name in value:
                try:
                    kwargs[name] = convs[name](value[name])
                except _FieldError as exc:
                    raise exc.at(f".{name}") from None
        for name in required:
            if name not in kwargs:
                raise _FieldError(f"missing field {name!r}")
        return cls(**kwargs)

    return convert


def from_dict(cls: type[T], data: Any, where: str | None = None) -> T:
    """JSON-decoded dict -> dataclass ``cls``, checking types; raises ProtocolError."""
    try:
        return typing.cast(T, _converter(cls)(data))
    except _FieldError as exc:
        raise ProtocolError(f"{where or cls.__name__}{exc.at('').path}: {exc.message}") from None


def encode_frame(message: Any) -> bytes:
    """A message (dict or dataclass) -> one length-prefixed frame."""
    body = json.dumps(to_dict(message), separators=(",", ":"), ensure_ascii=False).encode()
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    """Body length from a 4-byte header; raises ProtocolError when over the cap."""
    if len(header) != _HEADER.size:
        raise ProtocolError("truncated frame header")
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length} bytes exceeds {MAX_FRAME_BYTES}")
    return int(length)


def decode_body(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except ValueError as exc:  # not UTF-8, not JSON, or an integer over Python's digit limit
        raise ProtocolError(f"frame is not JSON: {exc}"[:300]) from None
    except RecursionError:
        raise ProtocolError("frame is nested deeper than the recursion limit") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ProtocolError("frame is not an object with a 'type'")
    return message


def read_frame(fd: int) -> dict[str, Any] | None:
    """Blocking read of one frame from a file descriptor; None at a clean EOF."""
    import os

    header = _read_exactly(os.read, fd, _HEADER.size)
    if not header:
        return None
    body = _read_exactly(os.read, fd, frame_length(header))
    return decode_body(body)


def write_frame(fd: int, message: Any) -> None:
    """Blocking write of one frame to a file descriptor."""
    import os

    data = memoryview(encode_frame(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exactly(read: Any, fd: int, n: int) -> bytes:
    chunks = []
    remaining = n
    while remaining:
        chunk = read(fd, min(remaining, 1 << 20))
        if not chunk:
            if remaining == n:
                return b""
            raise ProtocolError("connection closed inside a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
