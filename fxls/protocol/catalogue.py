"""Every diagnostic fxls reports: one class per code, with a stable code and message template.

Codes are a public contract (docs/diagnostics.md has one anchor per code, tests assert codes,
not wording). Standard library only: the server imports this module too.

    FX1xx  tracing: torch.fx could not trace (or traced something other than what runs)
    FX2xx  shapes: shape/dtype propagation failed
    FX3xx  graph: lint failures and unused computations; FX35x user passes, FX36x user rules
    FX4xx  set-up: building the module, inputs, directives, executing the file
    FX5xx  sandbox: the job hit a limit or crashed
    FX6xx  torch.compile: where TorchDynamo breaks the graph of ``forward``, and why
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from fxls.protocol.model import Diagnostic, Related, Severity, Span

DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "diagnostics.md"
"""The diagnostics reference in a source checkout (editable installs, the repository)."""


class Message:
    """Base class: subclasses set ``code``, ``severity``, ``title``, ``template`` and ``fix``.

    ``template`` and ``fix`` are ``str.format`` templates filled from the keyword arguments.
    ``notebook_template`` and ``notebook_fix``, when set, say the same of a notebook (its
    cells, not a file or a script); they may also use ``{line}``, the line of the span unless
    given, which the reports turn into the cell (``the cell at line 14`` -> ``cell 4``).
    """

    code: ClassVar[str] = ""
    severity: ClassVar[Severity] = "error"
    title: ClassVar[str] = ""
    template: ClassVar[str] = ""
    fix: ClassVar[str | None] = None
    notebook_template: ClassVar[str | None] = None
    notebook_fix: ClassVar[str | None] = None

    def __init__(self, span: Span, related: list[Related] | None = None, **kwargs: Any):
        self.span = span
        self.related = related or []
        self.kwargs = kwargs

    def diagnostic(
        self,
        data: dict[str, Any] | None = None,
        *,
        severity: Severity | None = None,
        notebook: bool = False,
    ) -> Diagnostic:
        """The wire diagnostic; ``severity`` overrides the code's usual one; ``notebook``: in
        a notebook's words, when the code has them."""
        fmt = _SafeDict({"line": str(self.span.line), **self.kwargs})
        template, fix = self.template, self.fix
        if notebook:
            template = self.notebook_template or template
            fix = self.notebook_fix or fix
        return Diagnostic(
            code=self.code,
            severity=severity or self.severity,
            message=template.format_map(fmt),
            span=self.span,
            fix=fix.format_map(fmt) if fix else None,
            related=list(self.related),
            data=dict(data or {}),
        )


class _SafeDict(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def docs_url(code: str) -> str | None:
    """Link to ``code``'s section of the diagnostics reference.

    ``FXLS_DOCS_URL`` (a base URL such as a published docs site) wins; otherwise the page of the
    source checkout fxls runs from, as a ``file:`` URI; None when neither exists.
    """
    base = os.environ.get("FXLS_DOCS_URL")
    if base:
        return f"{base.rstrip('/')}/diagnostics/#{code.lower()}"
    if DOCS_PAGE.is_file():
        return f"{DOCS_PAGE.as_uri()}#{code.lower()}"
    return None


# --- FX1xx tracing ---------------------------------------------------------------------


def worked_around(used: str) -> str:
    """The note a trace failure's fix starts with when a fallback capture (``used``, a
    strategy label) still gave the module its shapes."""
    return f"torch.fx.symbolic_trace fails here; fxls used `{used}` and still shows shapes."


def worked_around_each(used: dict[str, list[str]]) -> str:
    """:func:`worked_around` for one failure several classes reach (a base model's line each
    head model runs), where they were captured differently: the classes by strategy label."""
    each = "; ".join(f"`{label}` for {names(found)}" for label, found in used.items())
    return f"torch.fx.symbolic_trace fails here; fxls used {each}, and still shows shapes."


def names(found: list[str], shown: int = 4) -> str:
    """``found`` as backquoted names in words: "`A`, `B` and `C`"; beyond ``shown`` names,
    the rest counted ("`A`, `B`, `C` and 5 other classes")."""
    quoted = [f"`{n}`" for n in found]
    if len(quoted) > shown:
        rest = len(quoted) - shown + 1
        quoted = [*quoted[: shown - 1], f"{rest} other classes"]
    if len(quoted) < 2:
        return "".join(quoted)
    return f"{', '.join(quoted[:-1])} and {quoted[-1]}"


class FX101(Message):
    code = "FX101"
    severity = "warning"
    """Information instead when a fallback capture worked around it (pipeline)."""
    title = "Traced value used in control flow"
    template = "symbolically traced value used in control flow: `{source}`{where}"
    fix = (
        "torch.fx records operations, not Python decisions. Make the branch independent of "
        "tensor values (`torch.where`, `torch._assert` for checks), pass a fixed value with "
        "`# fxls: {arg} = True` when it is a flag argument, or mark the submodule as a leaf "
        "(`# fxls: leaf ClassName`)."
    )


class FX102(Message):
    code = "FX102"
    severity = "warning"
    """Information instead when a fallback capture worked around it (pipeline)."""
    title = "len() of a traced value"
    template = "`len()` is not supported on traced values: `{source}`{where}"
    fix = "Use `{use}` instead of `len({arg})`: {meaning}."


class FX103(Message):
    code = "FX103"
    severity = "warning"
    """Information instead when a fallback capture worked around it (pipeline)."""
    title = "Traced value iterated"
    template = "a traced value cannot be iterated: `{source}`{where}"
    fix = (
        "Iterate over a known count instead: `x.unbind(0)` for tensors, index sizes "
        "(`x.shape[0], x.shape[1]`) instead of unpacking `*x.shape`."
    )


class FX104(Message):
    code = "FX104"
    severity = "warning"
    """Information instead when a fallback capture worked around it (pipeline)."""
    title = "Traced value used as a Python number"
    template = "a traced value is used where Python needs a real number: `{source}`{where}"
    fix = (
        "Keep sizes as tensor math (`x.size(1) * r` without `int()`), or move the code into "
        "a leaf module or a `torch.fx.wrap`-ed function."
    )


class FX105(Message):
    code = "FX105"
    severity = "warning"
    """Information instead when a fallback capture worked around it (pipeline)."""
    title = "Factory function called with traced sizes"
    template = "`{func}` is called with traced sizes: `{source}`{where}"
    fix = (
        "Use `x.new_zeros((a, b))` / `x.new_ones(...)` / `x.new_empty(...)`, which accept "
        "traced sizes."
    )


class FX106(Message):
    code = "FX106"
    severity = "warning"
    """Information instead when a fallback capture worked around it (pipeline)."""
    title = "Buffer sliced with traced sizes"
    template = "a buffer is sliced with traced sizes: `{source}`{where}"
    fix = (
        "fxls traces buffers as graph values (`proxy_buffer_attributes`); if this persists, "
        "register the tensor with `self.register_buffer`."
    )


class FX107(Message):
    code = "FX107"
    severity = "warning"
    """Information instead when a fallback capture worked around it (pipeline)."""
    title = "torch module not traceable"
    template = "`{module}` cannot be traced through: {reason}"
    fix = "Keep it as a leaf (`# fxls: leaf {cls}`); fxls does this automatically when it can."


class FX108(Message):
    code = "FX108"
    severity = "warning"
    title = "Branch specialized during tracing"
    template = (
        "this check was decided once while tracing and is baked into the graph: `{source}`{where}"
    )
    fix = (
        "The traced graph only contains the branch taken for the example inputs. If other "
        "inputs take the other branch, the graph is wrong for them."
    )


class FX109(Message):
    code = "FX109"
    severity = "warning"
    title = "Traced graph differs from eager execution"
    template = "the traced graph gives {traced} but running `forward` gives {eager}"
    fix = "A Python decision in `forward` was specialized during tracing; see the FX108 warnings."


class FX199(Message):
    code = "FX199"
    severity = "warning"
    """Information instead when a fallback capture worked around it (pipeline)."""
    title = "Tracing failed"
    template = "torch.fx could not trace `{cls}`: {error}"
    fix = (
        "Mark the failing submodule as a leaf (`# fxls: leaf ClassName`) or skip the class "
        "(`# fxls: skip`)."
    )


# --- FX2xx shapes ----------------------------------------------------------------------


class FX201(Message):
    code = "FX201"
    title = "Shape error"
    template = "shape error in `{node}`: {error}"


class FX202(Message):
    code = "FX202"
    severity = "warning"
    title = "Shapes unavailable"
    template = "shapes could not be propagated past `{node}`: {error}"


# --- FX3xx graph -----------------------------------------------------------------------


class FX301(Message):
    code = "FX301"
    title = "Graph lint failure"
    template = "the FX graph is invalid: {error}"


class FX302(Message):
    code = "FX302"
    severity = "hint"
    title = "Unused computation"
    template = "`{node}` is computed but never used"
    fix = "Remove the computation, or use its result."


# --- FX35x user passes (``# fxls: pass Class``) -----------------------------------------


class FX351(Message):
    code = "FX351"
    title = "Pass leaves an invalid graph"
    template = "after pass `{fn}` on `{cls}`, `Graph.lint()` fails: {error}"
    fix = (
        "Fix the node the message names; `graph.lint()` at the end of the pass reports it "
        "where it happens."
    )


class FX352(Message):
    code = "FX352"
    title = "Pass erases a node still in use"
    template = "pass `{fn}` erases `{node}` of `{cls}` while it is still used by {users}"
    fix = (
        "Redirect its uses first (`node.replace_all_uses_with(new)`), then erase it; or "
        "erase its users before it."
    )


class FX353(Message):
    code = "FX353"
    title = "Pass uses a node before its definition"
    template = (
        "after pass `{fn}` on `{cls}`, `{node}` uses `{arg}`, which comes after it in the graph"
    )
    fix = (
        "Create the node where it is used: `with graph.inserting_after(...)` or "
        "`graph.inserting_before(...)` around `graph.call_function(...)`; new nodes go at the "
        "end of the graph otherwise."
    )


class FX354(Message):
    code = "FX354"
    title = "Pass copies a node from another graph"
    template = "after pass `{fn}` on `{cls}`, `{node}` reads `{arg}`, a node of another graph"
    fix = (
        "Copy with an argument map: `new_graph.node_copy(node, lambda n: env[n])`, keeping "
        "`env[old] = new` for every node copied."
    )


class FX355(Message):
    code = "FX355"
    title = "Pass leaves no single output"
    template = "after pass `{fn}` on `{cls}`, the graph has {count} output nodes; it needs one"
    fix = "Keep exactly one `output` node: replace its argument instead of adding another."


class FX356(Message):
    code = "FX356"
    title = "Pass raised"
    template = "pass `{fn}` raised on `{cls}`: {error}"


class FX357(Message):
    code = "FX357"
    title = "Pass returned no graph"
    template = "pass `{fn}` returned {returned} on `{cls}`, not a GraphModule or Graph"
    fix = "Return the GraphModule (`gm.recompile(); return gm`)."


class FX358(Message):
    code = "FX358"
    severity = "information"
    title = "Pass not run"
    template = "pass `{fn}` was not run on `{cls}`: {reason}"


# --- FX36x user rules (fxls_rules.py) ------------------------------------------------------


class FX360(Message):
    code = "FX360"
    severity = "information"
    title = "User rule matches"
    template = "rule `{rule}` matches here ({rules_file})"
    fix = "Apply the rule with its code action (verified in the sandbox)."


class FX361(Message):
    code = "FX361"
    title = "Rules file does not load"
    template = "the rules file could not be loaded: {error}"
    fix = "Fix the error; no rule applies until the file loads."


class FX362(Message):
    code = "FX362"
    title = "Rule without its pair"
    template = (
        "`{function}` has no `{missing}`: every `pattern_<name>` needs a `replacement_<name>`"
    )
    fix = "Define `{missing}` with the same parameters."


class FX363(Message):
    code = "FX363"
    title = "Rule does not trace"
    template = "`{function}` of rule `{rule}` cannot be traced with torch.fx: {error}"
    fix = "Write the pattern and its replacement as straight-line tensor code (no Python control flow on tensors)."


# --- FX4xx set-up ----------------------------------------------------------------------


class FX401(Message):
    code = "FX401"
    severity = "information"
    """An error when the arguments came from the user's ``init(...)`` (build)."""
    title = "Module cannot be built"
    template = "`{cls}` could not be built: {error}"
    fix = "Give constructor arguments with a directive above the class: `# fxls: init({example})`."


def suggested_shape(arg: str) -> str:
    """A directive right-hand side that fits what an argument's name says it is: a mask is
    ``(B, T, T) bool``, token ids ``(B, T) int64``, an image ``(B, 3, 224, 224)``, a pooled or
    time embedding ``(B, C)``."""
    name = arg.lower()
    if "mask" in name:
        return "(B, T, T) bool"
    if name in ("idx", "ids", "tokens", "labels", "targets", "target", "y") or name.endswith(
        ("_ids", "_idx", "tokens", "labels")
    ):
        return "(B, T) int64"
    if name in ("lengths", "lens") or name.endswith("_lengths"):
        return "(B,) int64"
    if name in ("img", "image", "images", "pixel_values") or name.startswith("im"):
        return "(B, 3, 224, 224)"
    if name in ("t", "timestep", "timesteps", "step"):
        return "(B,) int64"
    if "pooled" in name or name in ("temb", "emb") or name.endswith("_emb"):
        return "(B, C)"  # one vector per sample: a pooled text embedding, a time embedding
    if name in ("x", "input", "inputs"):
        return "(B, 3, 224, 224)"
    return "(B, T, C)"


class FX402(Message):
    code = "FX402"
    severity = "warning"
    title = "Inputs unknown"
    template = "fxls cannot tell what `{arg}` of `{cls}.forward` should be{reason}"
    fix = (
        "Declare it above the class: `# fxls: {arg} = {example}` (shape; names are "
        "symbolic dimensions, then a dtype when it is not float32)."
    )

    def __init__(self, span: Span, related: list[Related] | None = None, **kwargs: Any):
        kwargs.setdefault("example", suggested_shape(str(kwargs.get("arg", ""))))
        kwargs.setdefault("reason", "")
        super().__init__(span, related, **kwargs)


class FX403(Message):
    code = "FX403"
    title = "Invalid directive"
    template = "invalid fxls directive: {error}"
    fix = (
        "Expected one of: `# fxls: init(...)`, `# fxls: NAME = (dims) [dtype]`, `# fxls: "
        "NAME = <expression>`, `# fxls: leaf ClassName`, `# fxls: skip`; above a function: "
        "`# fxls: pass ClassName`."
    )


class FX404(Message):
    code = "FX404"
    title = "File failed to execute"
    template = "executing this file raised {error}"
    fix = (
        "fxls runs the file (in a sandbox) to find its modules; fix the error, or move "
        'scripts under `if __name__ == "__main__":`.'
    )
    notebook_template = "running the cell at line {line} raised {error}"
    notebook_fix = (
        "fxls runs a notebook's model code (in a sandbox) to find its modules: imports, "
        "classes, the models the cells build and their calls; cells that only train, plot or "
        "load data are not run. Fix the error, or keep what raised out of the model code."
    )


class FX409(Message):
    code = "FX409"
    severity = "warning"
    title = "Module cannot be imported"
    template = "`{module}` cannot be imported by the interpreter fxls runs: {error}"
    fix = (
        "Install `{package}` in that interpreter (the one `fxls.python` or `fxls check --python` "
        "names), or make it importable from the workspace; fxls shows this file's shapes once "
        "the file runs."
    )
    notebook_fix = (
        "Install `{package}` in that interpreter (the one `fxls.python` or `fxls check --python` "
        "names), or make it importable from the workspace; fxls shows the notebook's shapes "
        "once its cells run."
    )


class FX410(Message):
    code = "FX410"
    severity = "warning"
    """A script that exits at import says nothing about its models."""
    title = "Script exits at import"
    template = (
        "running this file stopped at {what}: fxls imports it as a module, with no command-line "
        "arguments"
    )
    fix = (
        'Move the script part under `if __name__ == "__main__":` (it does not run when the file '
        "is imported), or put the model classes in a module of their own."
    )
    notebook_template = (
        "running the cell at line {line} stopped at {what}: fxls runs a notebook's model code "
        "with no command-line arguments"
    )
    notebook_fix = (
        "Keep what exits out of the model code (cells that only train, plot or load data are "
        "not run), or put the model classes in a module of their own."
    )


class FX411(Message):
    code = "FX411"
    severity = "warning"
    """A library that is not built is the environment, not the model."""
    title = "Native library missing"
    template = "a native library could not be loaded: {error}"
    fix = (
        "Build or install it for the interpreter fxls runs (`fxls.python`, or `fxls check "
        "--python` with the project's virtual environment)."
    )


class FX412(Message):
    code = "FX412"
    severity = "information"
    """The file itself runs: its shapes are shown, and what its package lacks is said."""
    title = "Package code skipped"
    template = (
        "the `__init__.py` of package `{package}` imports `{module}`, which {why}: this file ran "
        "without its packages' `__init__.py`"
    )
    fix = (
        "Make `{module}` importable in that interpreter (`fxls.python`, `fxls check --python`): "
        "install it, or a build of it for that interpreter's torch, to run the package as "
        "Python would."
    )


class FX413(Message):
    code = "FX413"
    severity = "warning"
    """An installed package that raises when imported is the environment, not the model."""
    title = "Installed package fails to import"
    template = (
        "`{package}` is installed in the interpreter fxls runs but raised while importing: "
        "{error}{versions}"
    )
    fix = (
        "Install a `{package}` built for that interpreter's torch (or the torch it asks for) in "
        "the interpreter fxls runs (`fxls.python`, or `fxls check --python` with the project's "
        "virtual environment); fxls shows this file's shapes once the file runs."
    )


class FX405(Message):
    code = "FX405"
    severity = "information"
    title = "Inputs assumed"
    template = "input `{arg}` assumed to be {shape} (from {reason})"
    fix = "Declare the input with `# fxls: {arg} = {directive}` to choose the shape yourself."


class FX408(Message):
    code = "FX408"
    severity = "information"
    title = "Built with assumed arguments"
    template = "`{cls}` was built with values fxls chose: {assumed}"
    fix = (
        "Shapes below follow from these values. To use the real ones, write "
        "`# fxls: init({pin})` above the class with your values."
    )


class FX406(Message):
    code = "FX406"
    severity = "information"
    title = "Built on CPU"
    template = (
        "`{cls}` could not be built on the meta device ({error}); it was built on the CPU "
        "with real memory"
    )


# --- FX5xx sandbox ---------------------------------------------------------------------


class FX407(Message):
    code = "FX407"
    severity = "information"
    title = "File too large"
    template = (
        "fxls does not analyse this file: it has {size} characters, more than the {limit} "
        "fxls reads"
    )
    fix = "Move the model classes into a smaller module."
    notebook_template = (
        "fxls does not analyse this notebook: its Python cells have {size} characters, more "
        "than the {limit} fxls reads"
    )
    notebook_fix = "Move the model classes into a module of their own, or split the notebook."


class FX501(Message):
    code = "FX501"
    severity = "warning"
    """A capture that runs out of time says nothing about the model: a large default
    configuration, a slow import, a loaded machine."""
    title = "Timed out"
    template = "capturing `{cls}` did not finish within {limit}{why}"
    fix = "Raise `fxls.limits.timeoutSeconds`, or skip the class with `# fxls: skip`."


class FX502(Message):
    code = "FX502"
    title = "Out of memory"
    template = "capturing `{cls}` ran out of memory (limit {limit})"
    fix = (
        "fxls builds modules on the meta device; code that allocates real tensors at import "
        "or in `__init__` counts. Raise `fxls.limits.memoryMB` or skip the class."
    )


class FX503(Message):
    code = "FX503"
    title = "Crashed"
    template = "the worker crashed while capturing `{cls}`: {reason}"


class FX504(Message):
    code = "FX504"
    title = "Exited"
    template = "the code exited the worker while capturing `{cls}` ({reason})"
    fix = (
        "Code that runs at import must not call `sys.exit()`/`os._exit()`; guard scripts "
        'with `if __name__ == "__main__":`.'
    )
    notebook_fix = (
        "A notebook's model code must not call `sys.exit()`/`os._exit()`; keep such calls in "
        "cells that only train, plot or load data (those are not run)."
    )


class FX505(Message):
    code = "FX505"
    title = "Result too large"
    template = "the capture result for `{cls}` is too large ({reason})"


class FX506(Message):
    code = "FX506"
    severity = "warning"
    """Like a time-out, a capture that uses up its CPU time says nothing about the model."""
    title = "CPU time limit"
    template = "capturing `{cls}` used more than {limit} of CPU time"
    fix = "Raise `fxls.limits.cpuSeconds`, or skip the class with `# fxls: skip`."


class FX507(Message):
    code = "FX507"
    title = "File size limit"
    template = "capturing `{cls}` wrote a file larger than {limit}"


class FX508(Message):
    code = "FX508"
    severity = "warning"
    title = "Worker unavailable"
    template = "fxls could not capture this file: {reason}"
    notebook_template = "fxls could not capture this notebook: {reason}"


class FX509(Message):
    code = "FX509"
    title = "Protocol error"
    template = "the worker sent an invalid result while capturing `{cls}`: {reason}"


class FX510(Message):
    code = "FX510"
    severity = "warning"
    title = "Not captured: retries stopped"
    template = (
        "`{cls}` was not captured: {reason}, so fxls stopped capturing the file class by class"
    )
    notebook_template = (
        "`{cls}` was not captured: {reason}, so fxls stopped capturing the notebook class by class"
    )
    fix = (
        "Fix or skip (`# fxls: skip`) the classes that time out or take long; the others are "
        "captured again on the next edit."
    )


class FX511(Message):
    code = "FX511"
    severity = "warning"
    """fxls's own code failed on the class: nothing is known about the model from it."""
    title = "Capture stopped unexpectedly"
    template = "capturing `{cls}` stopped on an unexpected error: {error} (raised in {where})"
    fix = (
        "The class shows nothing until this is fixed. When the place names a file of fxls, "
        "this is a bug in fxls: please report it with this message (`fxls check --json` "
        "holds the traceback)."
    )


# --- FX6xx torch.compile -----------------------------------------------------------------


class FX601(Message):
    code = "FX601"
    severity = "warning"
    title = "Graph break: print or logging"
    template = "`torch.compile` breaks the graph here: a print or logging call ({reason})"
    fix = (
        "Remove the debug call, or let TorchDynamo run it after the graph: "
        "`torch._dynamo.config.reorderable_logging_functions.add(print)` (or the logging "
        "function); for `logger.info`-style methods add them to "
        "`torch._dynamo.config.ignore_logging_functions`."
    )


class FX602(Message):
    code = "FX602"
    severity = "warning"
    title = "Graph break: Python number from a tensor"
    template = (
        "`torch.compile` breaks the graph here: a Python number is read from a tensor "
        "(`.item()`, `.tolist()`, `int()`, `float()`) ({reason})"
    )
    fix = (
        "Keep the value a tensor (`x + t.sum()` rather than `x + t.sum().item()`), or set "
        "`torch._dynamo.config.capture_scalar_outputs = True` to capture `.item()` in the graph."
    )


class FX603(Message):
    code = "FX603"
    severity = "warning"
    title = "Graph break: control flow on tensor values"
    template = (
        "`torch.compile` breaks the graph here: a Python `if`/`while` depends on the values of "
        "a tensor ({reason})"
    )
    fix = (
        "Compute both sides and select with `torch.where(cond, a, b)`, or branch inside the "
        "graph with `torch.cond(pred, true_fn, false_fn, (x,))`."
    )


class FX604(Message):
    code = "FX604"
    severity = "warning"
    title = "Graph break: call TorchDynamo cannot trace"
    template = (
        "`torch.compile` breaks the graph here: a call it cannot trace (a builtin, a "
        "third-party function, a module TorchDynamo does not support) ({reason})"
    )
    fix = (
        "Use a torch operation instead (NumPy and Python math on tensors break the graph), or "
        "keep the helper out of compilation with `@torch.compiler.disable`."
    )


class FX605(Message):
    code = "FX605"
    severity = "warning"
    title = "Graph break: torch._dynamo.graph_break()"
    template = "`torch.compile` breaks the graph here: an explicit `graph_break()` ({reason})"
    fix = "Remove the `torch._dynamo.graph_break()` call when it was left from debugging."


class FX606(Message):
    code = "FX606"
    severity = "warning"
    title = "Graph break: untraceable Python code"
    template = (
        "`torch.compile` breaks the graph here: Python code it cannot trace (a generator, "
        "`copy.deepcopy`, an unsupported context manager...) ({reason})"
    )
    fix = (
        "Rewrite it with plain loops and tensor operations, or move it into a helper "
        "decorated with `@torch.compiler.disable`."
    )


class FX607(Message):
    code = "FX607"
    severity = "information"
    """Not a break: the check could not go on, and says so instead of failing."""
    title = "Compile check stopped"
    template = (
        "the compile check of `{cls}` stopped here: {reason}; breaks after this point are not known"
    )
    fix = (
        "fxls ran `forward` on {tensors} tensors; a value this line needs (a branch on a tensor, "
        "`.item()`) does not exist there. The breaks listed before it hold."
    )


class FX608(Message):
    code = "FX608"
    severity = "information"
    """Not a break: a cost at run time, which the check measures on one more size."""
    title = "Recompiles for every new size"
    template = (
        "`torch.compile` compiles `{cls}` again at every new input size, even after making "
        "sizes dynamic ({reason})"
    )
    fix = (
        "A Python loop, `range()`, `int()` or a list over a size fixes the graph to it: keep "
        "the size symbolic (`x.unbind(0)`, tensor operations), or mark it dynamic before the "
        "first call with `torch._dynamo.mark_dynamic(x, 0)`."
    )


class FX609(Message):
    code = "FX609"
    severity = "information"
    """Not a break: the check ended without a result, and says so instead of saying nothing."""
    title = "Compile check did not finish"
    template = (
        "the compile check of `{cls}` did not finish ({reason}): its graph breaks are not known"
    )
    fix = (
        "A busy machine slows `torch.compile`: a check its wall clock stopped has already run "
        "once more with twice the time, and the next edit checks again. For a class that "
        "always takes this long, raise `fxls.limits.timeoutSeconds` / `cpuSeconds`, or turn "
        "the check off (`fxls.compileCheck.enabled`)."
    )


class FX699(Message):
    code = "FX699"
    severity = "warning"
    title = "Graph break: other"
    template = "`torch.compile` breaks the graph here: {reason}"
    fix = (
        "Rewrite the line with torch operations, or keep the helper out of compilation with "
        "`@torch.compiler.disable`."
    )


ALL_MESSAGES: dict[str, type[Message]] = {
    cls.code: cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, Message) and cls is not Message
}
