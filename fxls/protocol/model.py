"""The data model of the wire contract between the fxls server and its worker.

Everything that crosses a process boundary is one of the dataclasses below, encoded by
``fxls.protocol.codec`` and sent as a frame of ``fxls.protocol.frames``.

Conventions used throughout:
- lines are 1-based, columns are 0-based *code point* offsets within the line (not UTF-8
  bytes, not UTF-16 units); the server converts to the client's position encoding.
- a dimension is an ``int`` or a ``str`` (a symbol name or expression such as ``"B"`` or
  ``"T - 1"``).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union

PROTOCOL_VERSION = 3

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

JobKind = Literal["capture", "rewrite", "compile", "preview"]
"""Kinds of job a child runs; each kind has one runner in ``fxls.worker.jobs``."""

FixKind = Literal[
    "dead-code",
    "directive",
    "assertion",
    "length",
    "sizes",
    "new-tensor",
    "concrete",
    "leaf",
    "wrap",
    "name-args",
    "attention",
    "apply-pass",
    "rule",
    "remove-print",
]
"""The kinds of :mod:`fxls.protocol.fixkinds` (the codec refuses any other)."""
Applicability = Literal["safe", "unsafe", "unavailable"]
"""``safe``: verified in the sandbox; ``unsafe``: could not be verified, or changes what the
module computes (offered only on request); ``unavailable``: cannot be made or checked."""

Phase = Literal["setup", "import", "init", "trace", "serialize"]
Severity = Literal["error", "warning", "information", "hint"]
ModuleStatus = Literal["traced", "partial", "failed", "skipped"]
InputOrigin = Literal["declared", "parent", "default", "assumed"]
CaptureMethod = Literal["fx", "fake-run", "meta-run", "none"]
RepairKind = Literal["leaf", "wrap", "concrete", "decided"]
NodeOp = Literal["placeholder", "get_attr", "call_function", "call_method", "call_module", "output"]
ValueKind = Literal["tensor", "size", "int", "float", "bool", "none", "device", "dtype", "other"]
ErrorKind = Literal["exception", "system_exit", "recursion"]
CompileStatus = Literal["ok", "stopped", "limit", "failed", "skipped"]
"""Of a compile check: ``ok`` ran to the end; ``stopped`` at a point that needs values fxls does
not have (the breaks before it are listed); ``limit``: the file's compile job hit a limit before
it (``message`` names it: ``time limit``, ``memory limit``); ``failed``/``skipped`` say why in
``message``."""


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
class KnownCall:
    """``Cls(<init>)`` written in another file of the workspace."""

    init: str
    where: str
    """``train.py:42`` (relative to the workspace when possible)."""


@dataclass
class PassRequest:
    """A user pass (``# fxls: pass Class`` above its ``def``) to run on a class's graph."""

    function: str
    """Name of the module-level function in the document: ``GraphModule -> GraphModule``."""
    line: int
    """Line of its ``def`` (decorators sit above it)."""


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
    call_sites: list[KnownCall] = field(default_factory=list)
    """Calls of the class found in other files of the workspace (evidence for building it)."""
    passes: list[PassRequest] = field(default_factory=list)
    """User passes to run on a copy of the traced module (``capture`` jobs only)."""


@dataclass
class RulesFile:
    """The workspace's rules file (``pattern_<name>`` / ``replacement_<name>`` function pairs).

    Workspace code: only the sandboxed worker executes it."""

    path: str
    source: str


@dataclass
class CaptureJob:
    """Capture every requested class of one document version."""

    path: str
    """The document's path; used as the code object's filename and for linecache."""
    source: str
    """The document text (the editor buffer, not the file on disk)."""
    classes: list[ClassRequest] = field(default_factory=list)
    sys_path: list[str] = field(default_factory=list)
    """Prepended to sys.path: the package root (or the file's folder) and the workspace root."""
    module: str = ""
    """The dotted name the document runs as (``pkg.models.llama``): its package is imported
    first and its relative imports resolve; empty: a script named ``__fxls_document__``."""
    module_is_package: bool = False
    """The document is a package's ``__init__.py``."""
    meta_init: bool = True
    """Build modules on the meta device (no real memory); fall back to CPU if that fails."""
    symbolic: bool = True
    """Keep user-named dimensions symbolic (fake tensors + ShapeEnv)."""
    reuse_blocks: bool = True
    """Trace identical sub-blocks once and copy their nodes and shapes (same results)."""
    fake_cache: bool = False
    """Use torch's fake-tensor dispatch cache in symbolic shape runs (slower in a fresh job
    child; the same results)."""
    children_from_trace: bool = True
    """Read how a parent builds and calls its sub-blocks off its FX trace when the trace saw
    every call (the same records as running the parent's ``forward`` again for them)."""
    eager_on_meta: bool = True
    """Compare a traced graph with eager execution (FX109) by running ``forward`` on meta
    tensors first, on fake tensors only when that raises (the same findings)."""
    rules: RulesFile | None = None
    """User rules to match in every traced class (FX360); when ``path`` is the document
    itself, its load problems are reported (FX361-FX363)."""
    notebook: bool = False
    """The source is a notebook's module (``fxls.analysis.notebook``): an exception at the top
    level stops the run there, and the classes defined before it are still captured (the
    cells before the failing one still give their shapes)."""


@dataclass
class Limits:
    timeout_s: float = 20.0
    """Wall clock: a backstop for jobs that wait; the CPU limit decides for jobs that compute."""
    cpu_s: float = 10.0
    """Soft RLIMIT_CPU (the hard limit is two seconds more): the same on a busy machine as on an
    idle one, so a capture that fits does so on every run."""
    memory_mb: int = 2048
    """Address space the job may add on top of the zygote's size at fork."""
    file_size_mb: int = 64
    nofile: int = 256


PRELOAD = (
    "transformers",
    "diffusers",
    "timm",
    "einops",
    "torchvision",
    "torchaudio",
    "accelerate",
    "peft",
    "x_transformers",
)
"""The packages ``Isolation.preload`` names by default: model libraries whose imports take
most of a job that uses them."""


@dataclass
class Isolation:
    seccomp: bool = True
    landlock: bool = True
    netns: bool = False
    """Private network namespace (user+net); often unavailable to unprivileged users."""
    preload: list[str] = field(default_factory=lambda: list(PRELOAD))
    """Installed packages (top-level names) the worker may keep imported between jobs once a
    job used them (``fxls.worker.process.preload``): imported outside the sandbox, from
    ``site-packages`` only."""


@dataclass
class FixRequest:
    """One fix to compute on the job's document (``JobRequest.rewrite``)."""

    id: str
    """Stable for one document version, e.g. ``FX302:Net:12:8``."""
    kind: FixKind
    cls: str
    """The class whose capture the fix is computed from and verified with."""
    span: Span
    """Where the fix applies in the job's source (a diagnostic's span, a call's span)."""
    code: str | None = None
    """The diagnostic code it fixes (None for refactors)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Kind-specific details: ``{"directive": "input", "arg": "x"}``, ``{"leaf": "Sub"}``."""


@dataclass
class RewriteJob:
    """Compute edits for ``fixes`` on the job's document and verify them in the sandbox."""

    fixes: list[FixRequest] = field(default_factory=list)
    combine: bool = False
    """Also apply every fix that verified on its own together and verify the result
    (``source.fixAll``, ``fxls check --fix``)."""
    unsafe: bool = False
    """Keep fixes that verify as unsafe in the combination."""
    verify: bool = True
    max_params: int = 20_000_000
    """Modules with more parameters are not run on real tensors (unsafe: too large to verify)."""
    seed: int = 0


@dataclass
class CompileJob:
    """Compile each class's ``forward`` with TorchDynamo (``JobRequest.compile``)."""

    modules: list[ModuleResult] = field(default_factory=list)
    """The capture's result of each class to check, without its nodes (how it was built:
    ``constructed``, ``build``, ``params``; what it was fed: ``inputs``,
    ``input_sizes``). The job builds each class from them instead of capturing the document
    again; when one cannot be rebuilt so, the job captures the document first, as when this
    is empty."""
    max_params: int = 20_000_000
    """Classes (with the parent they are built in) of more parameters run on meta tensors,
    not built on the CPU."""
    seed: int = 0


@dataclass
class JobRequest:
    id: int
    capture: CaptureJob
    """The document and its classes; every job kind works on one."""
    limits: Limits = field(default_factory=Limits)
    isolation: Isolation = field(default_factory=Isolation)
    kind: JobKind = "capture"
    """What the child computes (``fxls.worker.jobs`` dispatches on it)."""
    rewrite: RewriteJob | None = None
    """For kind ``rewrite``: the fixes to compute and verify."""
    compile: CompileJob | None = None
    """For kind ``compile``: the classes to check and how."""


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

    kind: ValueKind = "tensor"
    shape: list[Dim] | None = None
    dtype: str | None = None
    text: str | None = None
    """Readable form for non-tensors, e.g. ``"T"``, ``"3"``, ``"torch.float32"``."""


@dataclass
class Strategy:
    """How a class's graph was obtained: ``fx`` (``torch.fx.symbolic_trace``, with the
    automatic ``repairs`` it needed), ``fake-run`` (recorded by running ``forward`` on fake
    tensors, when no FX graph could be had), ``meta-run`` (the calls of one run of ``forward``
    on meta tensors at example sizes: a ``preview`` job's, shown until the capture replaces
    it), or ``none``. Written ``fx+leaf+wrap`` in reports
    (``fxls.protocol.labels.strategy_label``)."""

    method: CaptureMethod = "none"
    repairs: list[RepairKind] = field(default_factory=list)
    """For ``fx``: ``leaf`` (submodules kept whole, declared or found), ``wrap`` (functions
    recorded as one node), ``concrete`` (arguments fixed to their defaults), ``decided`` (rank
    and dtype checks answered from the inputs while tracing), in that order."""


@dataclass
class InputValue:
    """One ``forward`` argument a class was captured with."""

    name: str
    value: Value
    assumed: bool = False
    """fxls chose it (FX405); then ``origin`` is ``assumed`` too."""
    origin: InputOrigin = "declared"
    """``declared`` (a directive, an annotation, the CLI), ``parent`` (recorded from the
    parent's call), ``default`` (the parameter's default) or ``assumed`` (FX405)."""


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
    op: NodeOp
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
    inputs: list[str] = field(default_factory=list)
    """Names of the nodes whose outputs this node reads, in order, each once (the graph's
    data-flow edges; ``args[].node`` names only arguments that are exactly one node)."""


@dataclass
class NodeCopy:
    """A node of a sub-block whose nodes were copied from an identical block's (the 47 other
    blocks of a 48-block GPT), sent as what differs from its template node's record.

    ``fxls.protocol.copies.expanded`` makes the whole ``NodeInfo`` records every reader past
    the engine sees; the worker sends a copy only when the expansion equals the record.
    """

    at: int
    """Index of the node in ``ModuleResult.nodes`` once expanded."""
    of: int
    """Index of its template node (an earlier record; copies expand in index order)."""
    name: str
    target: str
    module_path: str | None
    users: int
    inputs: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    """Template node name -> this node's, for the arguments that are exactly one node."""
    texts: bool = False
    """The other arguments' texts name nodes too (``[getitem_2, getitem_3]``): the names of
    the template's inputs in them are its inputs' names (``self.inputs``)."""


@dataclass
class BlockCopy:
    """A run of node copies made for one identical sub-block (``h.7`` of a GPT, copied from
    ``h.0``), sent as the names of its nodes: node ``at + i`` is a copy (:class:`NodeCopy`) of
    node ``of + i`` whose name is ``names[i]``, whose target and module path are the
    template's under ``path`` instead of ``template_path``, whose inputs and node arguments
    are renamed (the run's own nodes to their new names, the others through ``outer``), and
    whose user count is ``users[i]``.

    The worker sends one only when its copies (``fxls.protocol.copies.block_node_copies``) are the node copies it made,
    and only for a run whose templates all come before it (``of + len(names) <= at``)."""

    at: int
    of: int
    names: list[str]
    template_path: str
    path: str
    users: list[int]
    outer: dict[str, str] = field(default_factory=dict)
    """Template-side name -> this side's name, for nodes before the template run that the
    block reads (its inputs)."""
    texts: list[int] = field(default_factory=list)
    """Offsets of the copies whose argument texts name nodes (``NodeCopy.texts``)."""


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

    kind: ErrorKind
    phase: Phase
    type: str
    message: str
    traceback: str = ""


ConstructionSource = Literal[
    "directive", "defaults", "config", "factory", "call site", "parent", "assumed"
]


@dataclass
class Construction:
    """Where a captured instance came from, in words a hover can show."""

    source: ConstructionSource
    text: str
    """``GPT(GPTConfig())``, ``resnet18()``, ``GPT.transformer.h[0]``."""
    assumed: dict[str, str] = field(default_factory=dict)
    """Values fxls chose itself, by parameter or field name (shown, never silent)."""
    pin: str | None = None
    """Arguments for ``# fxls: init(...)`` that reproduce this build, when expressible."""
    expr: str | None = None
    """A Python expression that rebuilds the same instance in the file's namespace, when
    expressible (``resnet18()``, ``GPT(GPTConfig()).get_submodule('transformer.h.0')``)."""
    inputs_from: str | None = None
    """For ``parent``: whose ``forward`` the inputs were recorded in (``GPT``)."""


PassChangeKind = Literal["added", "removed", "replaced"]
PassStatus = Literal["ok", "failed", "not run"]


@dataclass
class PassChange:
    """One node a user pass added, removed or replaced."""

    kind: PassChangeKind
    node: str
    op: str
    target: str
    """Readable target, as in ``NodeInfo.target``."""
    by: str | None = None
    """For ``replaced``: the node that took over its uses."""
    span: Span | None = None
    """``added``: the line of the pass that created it; otherwise where ``forward`` wrote it."""


@dataclass
class PassResult:
    """A user pass run on a copy of one class's traced module: the graph before -> after."""

    function: str
    line: int
    """Line of the pass's ``def``."""
    status: PassStatus
    before: int = 0
    """Nodes of the traced graph."""
    after: int = 0
    """Nodes of the graph the pass returned (0 when it returned none)."""
    added: int = 0
    removed: int = 0
    replaced: int = 0
    changes: list[PassChange] = field(default_factory=list)
    """The changes, capped (``added + removed + replaced`` counts them all)."""
    message: str = ""
    """Why it failed or did not run."""
    duration_s: float = 0.0


@dataclass
class GraphBreak:
    """One place where TorchDynamo (``torch.compile``) ends a graph, at the document's line."""

    code: str
    """The FX6xx code of its kind."""
    reason: str
    """torch's reason, first line, capped."""
    span: Span
    """The innermost frame of the document (a helper's line, or the call into other code)."""
    function: str = ""
    """The document's function that line is in (``forward``, a helper)."""


@dataclass
class CompileCheck:
    """A class's ``forward`` compiled with TorchDynamo and an eager backend (``compile`` job)."""

    status: CompileStatus
    graphs: int = 0
    breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: int | None = None
    """Frames compiled again on a third call at yet another size of the inputs (after torch's
    automatic dynamic shapes had their one recompilation at the second); None when not
    measured (a meta run, a slow first compilation, no batch dimension, a call that raised)."""
    tensors: str = ""
    """``cpu`` (a real build on small random inputs) or ``meta``."""
    message: str = ""
    """Why it stopped, failed or was skipped."""
    duration_s: float = 0.0


@dataclass
class ModuleResult:
    name: str
    line: int
    status: ModuleStatus
    strategy: Strategy = field(default_factory=Strategy)
    """How the graph was obtained."""
    build: str | None = None
    """``meta`` or ``cpu`` (when ``__init__`` needed real values)."""
    constructed: Construction | None = None
    """How the instance was obtained (None when it was not built)."""
    params: int | None = None
    buffers: int | None = None
    default_params: int | None = None
    """When the instance was built with fewer layers than its default configuration's
    (``LlamaConfig(num_hidden_layers=2)``): the parameters of the default one."""
    inputs: list[InputValue] = field(default_factory=list)
    """The ``forward`` arguments it was captured with, in order."""
    input_sizes: dict[str, int] = field(default_factory=dict)
    """The example size of each dimension name of ``inputs`` the capture ran with
    (``{"B": 2, "T": 16}``): with ``inputs``, what the compile check makes its inputs from. A
    class run with its parent's arguments also holds the parent's names of size 0 or 1
    (``{"B": 1}``): its shapes show them as numbers."""
    outputs: list[Value] = field(default_factory=list)
    nodes: list[NodeInfo] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: ErrorInfo | None = None
    timings: dict[str, float] = field(default_factory=dict)
    passes: list[PassResult] = field(default_factory=list)
    """User passes run on this class (``ClassRequest.passes``), in order."""
    node_copies: list[NodeCopy] = field(default_factory=list)
    """Records of ``nodes`` sent as copies of earlier ones (see :class:`NodeCopy`): a result
    as the worker sends it and as a frame decodes; empty once expanded
    (``fxls.protocol.copies.expanded``), as every reader past the engine sees it."""
    block_copies: list[BlockCopy] = field(default_factory=list)
    """Like ``node_copies``: runs of copies, one per copied sub-block."""
    example_nodes: list[str] = field(default_factory=list)
    """Nodes (by name) whose values hold for the example sizes ``example_sizes`` only: an
    operation fixed a named dimension to its example size (``F.interpolate``, ``len(x)``),
    and computed again at other sizes their numbers changed in a way no expression in the
    names gives, or that run failed. Every other number is the same at any size of the
    names, and a dimension that follows a name is written in it."""
    example_sizes: dict[str, int] = field(default_factory=dict)
    """The sizes ``example_nodes`` hold for (``{"B": 2}``); empty when no node is listed."""
    containers: list[str] = field(default_factory=list)
    """Module paths of the submodules that ran without code of the document (an
    ``nn.Sequential``, a subclass without a ``forward`` of its own, a library's module traced
    through): a node made inside one was written in the code that called it, so it belongs
    to the instance whose ``module_path`` is its own without these."""
    compile: CompileCheck | None = None
    """The compile check (``compile`` job), merged in by the engine after the capture."""


@dataclass
class TextEdit:
    """Replace ``span`` of the job's source (code point columns) with ``text``."""

    span: Span
    text: str


@dataclass
class OutputValues:
    """One output tensor of a class on one random input, as the verification of an edit saw it
    (:mod:`fxls.protocol.outputs` reads and compares them)."""

    dtype: str
    """torch's name of the dtype (``torch.float32``)."""
    shape: list[int]
    values: str
    """Base64 of little-endian float64 values (int64 for integer and bool dtypes; a complex
    number as its two parts) at evenly spaced positions of the flattened tensor: every value
    up to ``outputs.SAMPLED_VALUES``."""


@dataclass
class OutputSample:
    """An output of the original and of the edited class on the same input. A rewrite job
    sends them with a fix it found to compute the same; the server or CLI compares them again
    outside the job, where user code cannot have replaced the comparison."""

    where: str
    """``the output`` or ``output 2`` (of the flattened outputs)."""
    inputs: str
    """The input sizes (``x [2, 16]``)."""
    before: OutputValues
    after: OutputValues


@dataclass
class FixOutcome:
    """One fix (or the combination of several), computed and verified."""

    id: str
    applicability: Applicability
    title: str
    edits: list[TextEdit] = field(default_factory=list)
    """Against the job's source; empty when the fix is unavailable."""
    reason: str = ""
    """Why it is unsafe or unavailable (a counterexample when outputs differ)."""
    checks: list[str] = field(default_factory=list)
    """What was verified, in words (``outputs equal on x [2, 16] and [3, 16]``)."""
    fixes: list[str] = field(default_factory=list)
    """For a combination: the ids of the fixes it applies."""
    samples: list[OutputSample] = field(default_factory=list)
    """For a fix found to compute the same: the outputs compared, checked again by the
    server or CLI (``fxls.engine.fixes.compute``), which drops them once checked."""


@dataclass
class RewriteResult:
    outcomes: list[FixOutcome] = field(default_factory=list)
    """One per requested fix, in order."""
    combined: FixOutcome | None = None
    """With ``RewriteJob.combine``: every applicable fix together, verified together."""


@dataclass
class CaptureResult:
    modules: list[ModuleResult] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    """File-level diagnostics (import failures, bad directives not tied to a class)."""
    error: ErrorInfo | None = None
    """Set when the file itself failed to execute (phase ``import``)."""
    torch_version: str | None = None
    rewrite: RewriteResult | None = None
    """For a ``rewrite`` job: the fixes, computed and verified."""
    rules_too_slow: bool = False
    """The job's rules file took longer than its time to load (FX361 on the rules file): the
    server leaves that text out of the next jobs."""
    unfinished: list[str] = field(default_factory=list)
    """Classes the job did not capture: it reached its CPU limit (soft) during the first of
    them, after others were done. ``modules`` holds the ones done; the server captures these
    in another job."""
    imported: list[str] = field(default_factory=list)
    """Modules of ``Isolation.preload``'s packages the job imported from ``site-packages``:
    a hint for the worker, which imports them itself for the next jobs (never trusted as
    more than names)."""


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
    cpu_s: float = 0.0
    """CPU time the job used (user + system): beside ``duration_s`` it tells a busy machine
    (the job computed, slowly) from a job that waited (``sleep``, ``input()``, a lock)."""
    wall_limit_s: float = 0.0
    """The wall-clock limit the job ran with (a re-run on a busy machine has a longer one)."""
    cpu_limit_s: float = 0.0
    """The CPU limit the job ran with (a job of many classes has a larger one)."""
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
    protocol: int
    python: str
    torch_version: str
    isolation_available: list[str] = field(default_factory=list)
    isolation_missing: dict[str, str] = field(default_factory=dict)
    """Layer name -> why it is unavailable on this machine."""
    warm_s: float = 0.0
    warm_steps: dict[str, float] = field(default_factory=dict)
    """Seconds of each warm-up step run before the zygote was ready (the others run while it
    is idle)."""
