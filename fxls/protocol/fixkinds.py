"""Every kind of fix and refactor, in one place: what it does, which diagnostics it answers,
whether "fix all" applies it, how it is offered.

The server (``fxls.engine.fixes`` offers them, ``fxls check --fix`` picks among them), the
worker (``fxls.worker.rewrite.run`` runs module ``fxls.worker.rewrite.fixes.<module>`` for a
kind) and the docs read this table; ``FixKind`` in the protocol model lists the same names
(``tests/unit/test_fixkinds.py`` checks both, and that every module exists). A kind's module is
its name with ``-`` as ``_``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class FixKindInfo:
    kind: str
    summary: str
    codes: tuple[str, ...] = ()
    """The diagnostics it answers as a quick fix (none: a refactor offered at the cursor)."""
    fix_all: bool = False
    """Applied by ``source.fixAll.fxls`` and ``fxls check --fix`` when it verifies safe."""
    per_class: bool = False
    """Offered once per class and place (a directive above the class), not once per place."""
    pins: bool = False
    """Writes a directive holding a value fxls guessed: ``fxls check --fix`` only with
    ``--pin``."""

    @property
    def module(self) -> str:
        """The worker module that computes it: ``fxls.worker.rewrite.fixes.<module>``."""
        return self.kind.replace("-", "_")


FIX_KINDS: tuple[FixKindInfo, ...] = (
    FixKindInfo("dead-code", "remove an unused computation", ("FX302",), fix_all=True),
    FixKindInfo(
        "directive",
        "pin assumed inputs or constructor arguments, or declare an input left at `None`, "
        "with a directive",
        ("FX402", "FX405", "FX408"),
        fix_all=True,
        per_class=True,
        pins=True,
    ),
    FixKindInfo(
        "leaf",
        "keep a submodule fxls cannot trace as a leaf",
        ("FX101", "FX107", "FX199"),
        fix_all=True,
        per_class=True,
    ),
    FixKindInfo("wrap", "wrap a helper with torch.fx.wrap", ("FX1xx",), fix_all=True),
    FixKindInfo(
        "concrete",
        "fix a flag argument by a directive",
        ("FX101",),
        fix_all=True,
        per_class=True,
        pins=True,
    ),
    FixKindInfo("assertion", "`assert` as `torch._assert`", ("FX101",), fix_all=True),
    FixKindInfo(
        "length", "`len(x)` as `x.size(0)`, `len(x.shape)` as `x.dim()`", ("FX102",), fix_all=True
    ),
    FixKindInfo("sizes", "pass unpacked sizes as one argument", ("FX103",), fix_all=True),
    FixKindInfo("new-tensor", "`torch.zeros(...)` as `x.new_zeros(...)`", ("FX105",), fix_all=True),
    FixKindInfo("name-args", "name every argument of a call (refactor)"),
    FixKindInfo("attention", "hand-written attention as `F.scaled_dot_product_attention`"),
    FixKindInfo("apply-pass", "apply a user pass to the source (refactor)"),
    FixKindInfo("rule", "apply a user rule at a match", ("FX360",), fix_all=True),
    FixKindInfo("remove-print", "remove a debug `print` or logging call", ("FX601",)),
)

BY_KIND: dict[str, FixKindInfo] = {k.kind: k for k in FIX_KINDS}
FIX_ALL_KINDS: frozenset[str] = frozenset(k.kind for k in FIX_KINDS if k.fix_all)
PIN_KINDS: frozenset[str] = frozenset(k.kind for k in FIX_KINDS if k.pins)
PER_CLASS_KINDS: frozenset[str] = frozenset(k.kind for k in FIX_KINDS if k.per_class)


def length_as(arg: ast.expr) -> tuple[ast.expr, str]:
    """What the ``length`` fix writes for ``len(arg)``: the expression it calls a method of
    and the call. ``len(x.shape)`` and ``len(x.size())`` are ``x``'s rank, ``x.dim()``;
    ``len(x)`` of a tensor is its first size, ``x.size(0)``."""
    if isinstance(arg, ast.Attribute) and arg.attr == "shape":
        return arg.value, ".dim()"
    if (
        isinstance(arg, ast.Call)
        and isinstance(arg.func, ast.Attribute)
        and arg.func.attr == "size"
        and not arg.args
        and not arg.keywords
    ):
        return arg.func.value, ".dim()"
    return arg, ".size(0)"


def length_written(arg: ast.expr, segment: Callable[[ast.expr], str]) -> str:
    """The text the ``length`` fix writes for ``len(arg)`` (:func:`length_as`), an
    expression's own text given by ``segment``."""
    receiver, method = length_as(arg)
    written = segment(receiver)
    return f"({written}){method}" if needs_parentheses(receiver) else written + method


def needs_parentheses(node: ast.expr) -> bool:
    """Whether ``node`` must be parenthesized before ``.attr`` (``(a + b).size(0)``)."""
    return not isinstance(
        node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.List, ast.Tuple)
    ) or (isinstance(node, ast.Constant) and isinstance(node.value, (int, float)))
