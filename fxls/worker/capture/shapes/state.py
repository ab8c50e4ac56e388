"""Module state put back after code of the document ran on it.

A ``forward`` may assign to its module: a proxy while tracing (``self.mask = ...``), or a
setting it derives from its input (Swin's ``set_shift_and_window_size`` makes the window as
small as a small image). The capture runs the same instances many times (traced, at other
sizes, in other input forms); what one run assigned must not change the next. That holds for
what it put into a dict or list of its own too: LeViT's attention caches its bias per device in
``self.attention_bias_cache``, and a proxy left there from one trace is read by the next.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from torch import nn


@contextlib.contextmanager
def kept(modules: Iterable[nn.Module]) -> Iterator[None]:
    """Put back every attribute, parameter, buffer and submodule entry of ``modules`` that
    the code run inside assigned."""
    keeper = Keeper()
    for module in modules:
        keeper.keep_one(module)
    try:
        yield
    finally:
        keeper.restore()


MAX_KEPT_ITEMS = 1024
"""A dict or list of a module with more items is data, not a cache: its contents are not kept."""

_TORCH_STATE = frozenset({"_parameters", "_buffers", "_modules"})


class Keeper:
    """The state of modules as it was before a run, put back by :meth:`restore`."""

    def __init__(self) -> None:
        self._saved: dict[
            int, tuple[nn.Module, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]
        ] = {}
        self._contents: list[tuple[dict[Any, Any] | list[Any], dict[Any, Any] | list[Any]]] = []
        """The dicts and lists the kept modules of the document hold, each with a copy."""

    def keep_one(self, m: nn.Module) -> None:
        if id(m) not in self._saved:
            self._saved[id(m)] = (
                m,
                dict(m.__dict__),
                dict(m._parameters),
                dict(m._buffers),
                dict(m._modules),
            )
            if not type(m).__module__.startswith("torch."):
                self._keep_contents(m.__dict__)

    def _keep_contents(self, attrs: dict[str, Any]) -> None:
        for name, value in attrs.items():
            kind = type(value)
            container = (kind is dict or kind is list) and name not in _TORCH_STATE
            if container and len(value) <= MAX_KEPT_ITEMS:
                self._contents.append((value, value.copy()))

    def keep_leaf(self, module: nn.Module) -> None:
        """Before a leaf runs its ``forward``: keep its state and its submodules' when it is
        not one of torch's own layers (whose ``forward`` assigns nothing)."""
        if id(module) in self._saved or type(module).__module__.startswith("torch."):
            return
        for sub in module.modules():
            self.keep_one(sub)

    def restore(self) -> None:
        for m, attrs, params, buffers, children in self._saved.values():
            m.__dict__.clear()
            m.__dict__.update(attrs)
            m._parameters.clear()
            m._parameters.update(params)
            m._buffers.clear()
            m._buffers.update(buffers)
            m._modules.clear()
            m._modules.update(children)
        # every one, not only those that differ: telling would compare what the run put
        # there (a proxy, a tensor), and that comparison is itself traced or ambiguous
        for container, items in self._contents:
            if isinstance(container, dict):
                container.clear()
                container.update(items)
            else:
                container[:] = items
        self._saved.clear()
        self._contents.clear()
