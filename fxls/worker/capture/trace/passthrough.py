"""Wrappers that hand every argument to one submodule: ``forward(self, *args, **kwargs)``
whose body is ``return self.decoder(*args, **kwargs)`` (transformers' ``*DecoderWrapper``).

Such a ``forward`` names no input, so nothing can be planned for it and torch.fx fixes
``*args`` and ``**kwargs`` to empty: the submodule is called with nothing. fxls takes the
inputs of the submodule's ``forward`` instead (:func:`parameters`), and traces the wrapper
through a subclass whose ``forward`` has the submodule's parameters and calls the wrapper's
own ``forward`` with them (:func:`traced_class`): every node is still made by the wrapper's
code and the submodule's, at their lines.
"""

from __future__ import annotations

import ast
import inspect
import keyword
from types import FunctionType
from typing import Any

from torch import nn

from fxls.worker.capture.spans import forward_definition

_VAR = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS


def _plain_forward(cls: type) -> FunctionType | None:
    forward = getattr(cls, "forward", None)
    try:
        forward = inspect.unwrap(forward) if forward is not None else None
    except ValueError:
        return None
    return forward if isinstance(forward, FunctionType) else None


def wrapped(module: nn.Module) -> nn.Module | None:
    """The submodule ``module.forward`` passes all of its arguments to, or None."""
    forward = _plain_forward(type(module))
    if forward is None:
        return None
    code = forward.__code__
    if code.co_argcount != 1 or code.co_kwonlyargcount or code.co_flags & _VAR != _VAR:
        return None  # cheap refusal first: only ``(self, *args, **kwargs)`` reads the source
    name = _passed_to(forward_definition(type(module)))
    sub = module._modules.get(name) if name is not None else None
    return sub if isinstance(sub, nn.Module) and sub is not module else None


def _passed_to(definition: ast.stmt | None) -> str | None:
    """``decoder`` for ``def forward(self, *args, **kwargs): return self.decoder(*args,
    **kwargs)`` (a docstring may come first), else None."""
    if not isinstance(definition, ast.FunctionDef):
        return None
    a = definition.args
    if len(a.args) != 1 or a.vararg is None or a.kwarg is None:
        return None
    body = list(definition.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return None
    call = body[0].value
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return None
    owner = call.func.value
    if not (isinstance(owner, ast.Name) and owner.id == a.args[0].arg):
        return None
    star = call.args[0] if len(call.args) == 1 else None
    if not (isinstance(star, ast.Starred) and _is_name(star.value, a.vararg.arg)):
        return None
    if len(call.keywords) != 1 or call.keywords[0].arg is not None:
        return None
    return call.func.attr if _is_name(call.keywords[0].value, a.kwarg.arg) else None


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def parameters(module: nn.Module) -> list[inspect.Parameter] | None:
    """The parameters of the ``forward`` a pass-through wrapper hands its arguments to (the
    wrapper's inputs), or None for any other module."""
    inner = wrapped(module)
    if inner is None:
        return None
    try:
        params = list(inspect.signature(inner.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params]
    if any(not n.isidentifier() or keyword.iskeyword(n) or n.startswith("_fxls") for n in names):
        return None
    return params


def traced_class(root: Any) -> type | None:
    """For a pass-through wrapper: a subclass whose ``forward`` takes the parameters of the
    submodule's ``forward`` (with its defaults) and calls the wrapper's own ``forward`` with
    them, as a caller would; torch.fx makes its placeholders from that signature. None for any
    other module, or when the class refuses a subclass."""
    if not isinstance(root, nn.Module):
        return None
    params = parameters(root)
    own = _plain_forward(type(root))
    if params is None or own is None:
        return None
    try:
        forward = _forward_taking(params, own)
    except (SyntaxError, ValueError):  # a signature the made function cannot spell
        return None
    return with_forward(type(root), forward)


def with_forward(cls: type, forward: FunctionType) -> type | None:
    """A subclass of ``cls`` of the same name whose ``forward`` is ``forward``; None when the
    class refuses a subclass (a metaclass, ``__init_subclass__``): it is traced as it is."""
    try:
        return type(
            cls.__name__,
            (cls,),
            {"forward": forward, "__module__": cls.__module__, "__qualname__": cls.__qualname__},
        )
    except Exception:
        return None


def _forward_taking(params: list[inspect.Parameter], own: FunctionType) -> FunctionType:
    """``def forward(self, <params>): return own(self, <the same arguments>)``; defaults are
    the parameters' own objects (names in the made function's namespace, never source text)."""
    head: list[str] = ["self"]
    passed: list[str] = []
    namespace: dict[str, Any] = {"_fxls_own": own}
    starred = False
    for i, p in enumerate(params):
        default = ""
        if p.default is not p.empty:
            namespace[f"_fxls_default_{i}"] = p.default
            default = f"=_fxls_default_{i}"
        if p.kind is p.VAR_POSITIONAL:
            head.append(f"*{p.name}")
            passed.append(f"*{p.name}")
            starred = True
        elif p.kind is p.VAR_KEYWORD:
            head.append(f"**{p.name}")
            passed.append(f"**{p.name}")
        elif p.kind is p.KEYWORD_ONLY:
            if not starred:
                head.append("*")
                starred = True
            head.append(p.name + default)
            passed.append(f"{p.name}={p.name}")
        else:
            head.append(p.name + default)
            # by keyword once a default is given, as callers of library models pass them (a
            # decorated forward may add ``use_cache`` itself: positional, it came twice)
            keyed = default and p.kind is p.POSITIONAL_OR_KEYWORD
            passed.append(f"{p.name}={p.name}" if keyed else p.name)
    text = f"def forward({', '.join(head)}):\n    return _fxls_own(self, {', '.join(passed)})\n"
    exec(compile(text, "<fxls pass-through forward>", "exec"), namespace)
    made = namespace["forward"]
    assert isinstance(made, FunctionType)
    return made
