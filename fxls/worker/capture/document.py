"""The executed document: its namespace, source lines and AST, shared by every class capture."""

from __future__ import annotations

import ast
import builtins
import linecache
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from fxls.protocol.model import CaptureJob
from fxls.protocol.positions import SourceText

MODULE_NAME = "__fxls_document__"
"""``__name__`` of the executed document (never ``"__main__"``)."""


@dataclass
class Document:
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
    copied_nodes: dict[int, tuple[Any, dict[int, int]]] = field(default_factory=dict)
    """``id`` of a ``ModuleResult`` -> (the result, node index -> index of the node it was copied
    from): what :func:`fxls.worker.capture.reuse.compact` may send as copies."""

    @property
    def path(self) -> str:
        return self.job.path


def prepare(job: CaptureJob) -> Document:
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
    module = types.ModuleType(MODULE_NAME)
    module.__file__ = job.path
    namespace: dict[str, Any] = module.__dict__
    namespace["__builtins__"] = builtins
    sys.modules[MODULE_NAME] = module
    return Document(job=job, source=SourceText(job.source), namespace=namespace, tree=None)


def execute(doc: Document) -> None:
    """Run the document text (user code: may raise anything) and parse it for the AST views."""
    code = compile(doc.job.source, doc.job.path, "exec")
    exec(code, doc.namespace)
    try:
        doc.tree = ast.parse(doc.job.source)
    except SyntaxError:
        doc.tree = None


def resolvable(node: ast.AST, namespace: dict[str, Any]) -> bool:
    """Whether an expression uses only names the file (or Python's builtins) defines, and
    nothing that could not be evaluated on its own (lambdas, walrus, await, yield)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id not in namespace and not hasattr(builtins, sub.id):
            return False
        if isinstance(sub, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
    return True
