"""Protocol values in the words reports use (the same in the editor, the CLI and the worker's
own messages)."""

from __future__ import annotations

from fxls.protocol.model import Strategy


def strategy_label(strategy: Strategy) -> str:
    """``fx``, ``fx`` and its repairs joined by ``+`` (``fx+leaf``, ``fx+leaf+wrap``...),
    ``fake-run`` or ``none``: the ``capture`` of ``fxls check --json``."""
    return "+".join([strategy.method, *strategy.repairs])


SPLITS = frozenset({"chunk", "tensor_split", "split", "split_with_sizes"})
"""Node targets (a tensor method's or torch function's name) that split a tensor into pieces:
the worker iterates their pieces, and a line's hint shows the split rather than a piece."""
