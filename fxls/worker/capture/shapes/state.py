"""Module state put back after code of the document ran on it.

A ``forward`` may assign to its module: a proxy while tracing (``self.mask = ...``), or a
setting it derives from its input (Swin's ``set_shift_and_window_size`` makes the window as
small as a small image). The capture runs the same instances many times (traced, at other
sizes, in other input forms); what one run assigned must not change the next.
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


class Keeper:
    """The state of modules as it was before a run, put back by :meth:`restore`."""

    def __init__(self) -> None:
        self._saved: dict[
            int, tuple[nn.Module, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]
        ] = {}

    def keep_one(self, m: nn.Module) -> None:
        if id(m) not in self._saved:
            self._saved[id(m)] = (
                m,
                dict(m.__dict__),
                dict(m._parameters),
                dict(m._buffers),
                dict(m._modules),
            )

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
        self._saved.clear()
