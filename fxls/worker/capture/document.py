"""The executed document: its namespace, source lines and AST, shared by every class capture."""

from __future__ import annotations

import ast
import builtins
import dis
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from fxls.protocol.model import CaptureJob
from fxls.protocol.positions import SourceText

MODULE_NAME = "__fxls_document__"
"""``__name__`` of a document that runs as a script (never ``"__main__"``)."""


@dataclass
class ExecutedDocument:
    """One document version, executed (or about to be) in this process."""

    job: CaptureJob
    source: SourceText
    namespace: dict[str, Any]
    tree: ast.Module | None
    records: dict[str, Any] = field(default_factory=dict)
    """Class name -> ``parents.Recorded``: the instance a parent built and called."""
    built_by_parents: dict[str, Any] = field(default_factory=dict)
    """Class name -> ``parents.Recorded`` without inputs: an instance a parent built whose
    ``forward`` could not run (its inputs unknown), for a class that cannot be built alone."""
    captures: dict[str, Any] = field(default_factory=dict)
    """Class name -> the ``ClassCapture`` its result came from (built module, inputs, graph),
    for the rewrites that read and verify against it."""
    package_skipped: BaseException | None = None
    """Why the ``__init__.py`` of the document's packages did not run: a module the
    interpreter lacks, or an installed package that raised while importing (the document ran
    without them, :func:`execute`; :func:`unimportable` names the module)."""
    kept_runs: Any = None
    """The ``shapes.keptruns.KeptRuns`` of the job's classes (made by the first that needs
    it), by whether they keep the graphs' runs (False) or the comparisons' runs of
    ``forward`` (True)."""
    copied_nodes: dict[int, tuple[Any, dict[int, int]]] = field(default_factory=dict)
    """``id`` of a ``ModuleResult`` -> (the result, node index -> index of the node it was copied
    from): what :func:`fxls.worker.capture.trace.reuse.compact` may send as copies."""

    @property
    def path(self) -> str:
        return self.job.path


class EditorText(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the document's module from the editor's text, first on ``sys.meta_path``: its
    package (and anything else) importing it by name gets the text being edited, never the
    file on disk, and the module object is the document's namespace."""

    def __init__(self, job: CaptureJob, module: types.ModuleType) -> None:
        self.job = job
        self.module = module

    def find_spec(
        self, fullname: str, path: Any = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.job.module:
            return None
        spec = importlib.machinery.ModuleSpec(
            fullname, self, origin=self.job.path, is_package=self.job.module_is_package
        )
        spec.has_location = True
        if self.job.module_is_package:
            spec.submodule_search_locations = [os.path.dirname(self.job.path)]
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        exec(compile(self.job.source, self.job.path, "exec", dont_inherit=True), module.__dict__)


def prepare(job: CaptureJob) -> ExecutedDocument:
    """Register the text for tracebacks and spans, and make the module it runs as."""
    for entry in reversed(job.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    linecache.cache[job.path] = (
        len(job.source),
        None,
        job.source.splitlines(keepends=True),
        job.path,
    )
    module = types.ModuleType(job.module or MODULE_NAME)
    module.__file__ = job.path
    namespace: dict[str, Any] = module.__dict__
    namespace["__builtins__"] = builtins
    if job.module:
        sys.meta_path.insert(0, EditorText(job, module))
    else:
        sys.modules[MODULE_NAME] = module
    return ExecutedDocument(job=job, source=SourceText(job.source), namespace=namespace, tree=None)


def execute(doc: ExecutedDocument) -> None:
    """Run the document text (user code: may raise anything) and parse it for the AST views.

    A document in a package is imported by its name: its parent packages run first (their
    ``__init__.py`` from disk, which may import the document itself, getting the editor's
    text), then the document, once, as Python would import it."""
    if doc.job.module:
        # a text run before in this process as the same module (the original of a rewrite,
        # then its edited text) would be the module imported: this text runs
        sys.modules.pop(doc.job.module, None)
        try:
            importlib.import_module(doc.job.module)
        except Exception as exc:
            if not unimportable(exc) or _ran(exc, doc.job.path) or not _parent_packages(doc.job):
                raise
            # a package's __init__.py imports what this interpreter lacks (an optional
            # dependency of other modules): run the document without its packages' code,
            # unless it needs that code too (then the missing module is the answer)
            stubs = _parent_packages(doc.job)
            for name, folder in stubs:
                _namespace_package(name, folder)
            needs_package = False
            try:
                importlib.import_module(doc.job.module)
            except BaseException:
                needs_package = True
            if needs_package:
                for name, _ in stubs:  # as after the first attempt: the packages did not run
                    sys.modules.pop(name, None)
                raise exc  # outside the handler: no context of the second attempt
            doc.package_skipped = exc
    else:
        exec(compile(doc.job.source, doc.job.path, "exec", dont_inherit=True), doc.namespace)
    try:
        doc.tree = ast.parse(doc.job.source)
    except SyntaxError:
        doc.tree = None


def unimportable(exc: BaseException) -> str | None:
    """The module that made an import fail because of the environment: the one a
    ``ModuleNotFoundError`` names, or the top-level package of an installed distribution whose
    own import raised (``torchvision`` built for another torch raises ``RuntimeError:
    operator torchvision::nms does not exist`` when imported); None for anything else."""
    if isinstance(exc, ModuleNotFoundError):
        return exc.name
    return broken_install(exc)


def broken_install(exc: BaseException, path: str = "") -> str | None:
    """The top-level package installed in the interpreter (under ``site-packages``) whose
    import raised ``exc``: of the packages the traceback enters by an import (an ``import``
    statement or ``importlib.import_module``) from other code, the innermost. None when no
    such import is on the traceback: ``exc`` was raised by a call the code at ``path`` or
    the workspace made (a torch function failing at import is that code's error, not the
    install's)."""
    found: str | None = None
    tb = exc.__traceback__
    caller: types.TracebackType | None = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        package = _top_package(tb)
        if (
            caller is not None
            and package
            and package != _top_package(caller)
            and filename != path
            and _installed(filename)
            and _importing(caller)
        ):
            found = package
        caller = tb
        tb = tb.tb_next
    return found


def _top_package(tb: types.TracebackType) -> str:
    name = tb.tb_frame.f_globals.get("__name__")
    return name.partition(".")[0] if isinstance(name, str) else ""


_IMPORT_OPS = frozenset(
    dis.opmap[op] for op in ("IMPORT_NAME", "IMPORT_FROM", "IMPORT_STAR") if op in dis.opmap
)


def _importing(tb: types.TracebackType) -> bool:
    """Whether the frame of ``tb`` was importing when the exception passed through it: the
    import system's own frame, or an ``import`` statement (the import system cuts its frames
    from the traceback of an ``import`` statement)."""
    code = tb.tb_frame.f_code
    if code.co_filename.startswith("<frozen importlib"):
        return True
    lasti = tb.tb_lasti
    return 0 <= lasti < len(code.co_code) and code.co_code[lasti] in _IMPORT_OPS


def _installed(filename: str) -> bool:
    parts = filename.split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts


def _ran(exc: BaseException, path: str) -> bool:
    """Whether the document's own code is on the exception's traceback."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            return True
        tb = tb.tb_next
    return False


def _parent_packages(job: CaptureJob) -> list[tuple[str, str]]:
    """(name, folder) of the packages above the document's module, outermost first."""
    assert job.module is not None
    parts = job.module.split(".")[:-1]
    if not parts:
        return []
    spec = importlib.machinery.PathFinder.find_spec(parts[0], sys.path)
    if spec is None or not spec.submodule_search_locations:
        return []
    folder = next(iter(spec.submodule_search_locations))
    found = [(parts[0], folder)]
    for depth in range(2, len(parts) + 1):
        folder = os.path.join(folder, parts[depth - 1])
        found.append((".".join(parts[:depth]), folder))
    return found


def _namespace_package(name: str, folder: str) -> None:
    """Make ``name`` an importable package of ``folder`` whose ``__init__.py`` is not run."""
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [folder]
    module = importlib.util.module_from_spec(spec)
    init = os.path.join(folder, "__init__.py")
    if os.path.isfile(init):
        # where the package is (not run): ``inspect.getfile`` of a module without a file
        # raises, and TorchDynamo calls it on the modules of the code it compiles
        module.__file__ = init
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, module)


def module_name(doc: ExecutedDocument) -> str:
    """``__name__`` of the document's module."""
    return doc.job.module or MODULE_NAME


def resolvable(node: ast.AST, namespace: dict[str, Any]) -> bool:
    """Whether an expression uses only names the file (or Python's builtins) defines, and
    nothing that could not be evaluated on its own (lambdas, walrus, await, yield)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id not in namespace and not hasattr(builtins, sub.id):
            return False
        if isinstance(sub, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
    return True
