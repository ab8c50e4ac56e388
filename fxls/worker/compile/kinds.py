"""Which FX6xx code a TorchDynamo graph break is, from torch's reason text (pure).

torch words its reasons for people and changes them between versions, so each kind matches a
few stable fragments (measured on torch 2.13) and anything else is FX699.
"""

from __future__ import annotations

import re

MAX_REASON = 240
"""Characters of torch's reason a diagnostic repeats."""

_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("FX605", re.compile(r"graph_break\(\)|User-inserted graph break", re.IGNORECASE)),
    (
        "FX601",
        re.compile(
            r"builtin operator `print`|logging|Logger method|`print`|reorderable_logging",
            re.IGNORECASE,
        ),
    ),
    (
        "FX602",
        re.compile(
            r"Tensor\.item\(\)|tolist|capture_scalar_outputs|_local_scalar_dense|"
            r"Tensor\.numpy|data-dependent output|__int__|__float__|__bool__ on",
            re.IGNORECASE,
        ),
    ),
    (
        "FX603",
        re.compile(
            r"generic_jump|Data-dependent branching|data dependent (?:branch|control)|"
            r"jump.*TensorVariable|branch.*tensor",
            re.IGNORECASE,
        ),
    ),
    (
        "FX606",
        re.compile(
            r"generator|deepcopy|yield|context manager|copy\.copy|inline_call|"
            r"InliningInstructionTranslator|closure|nonlocal",
            re.IGNORECASE,
        ),
    ),
    (
        "FX604",
        re.compile(
            r"builtin|skipped|skip_files|non-torch|numpy|third.party|Attempted to call function|"
            r"Attempted to wrap|does not support|not supported|unsupported|C extension|"
            r"call_function",
            re.IGNORECASE,
        ),
    ),
)


_RAISED = re.compile(
    r"no exception handler|Exception will propagate|when making fake tensor call",
    re.IGNORECASE,
)


def is_raise(reason: str) -> bool:
    """Whether a "break" is TorchDynamo giving up on an exception the code raised (a
    ``KeyError`` in ``forward``): the error is the module's, not a graph break."""
    return bool(_RAISED.search(short_reason(reason, limit=2000)))


def code_of(reason: str) -> str:
    """The FX6xx code of a break with torch's ``reason`` (its first line and explanation: the
    hints below them name other features); FX699 when no kind matches."""
    head = short_reason(reason, limit=2000)
    for code, pattern in _KINDS:
        if pattern.search(head):
            return code
    return "FX699"


def short_reason(reason: str, limit: int = MAX_REASON) -> str:
    """torch's reason on one line: its first line, plus its ``Explanation:`` when there is one,
    at most ``limit`` characters."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    if not lines:
        return "no reason given"
    text = lines[0]
    explanation = next((ln for ln in lines[1:] if ln.startswith("Explanation:")), None)
    if explanation is not None:
        text = f"{text}: {explanation.removeprefix('Explanation:').strip()}"
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


_NEEDS_VALUES = re.compile(
    r"meta tensors|data.dependent|DataDependent|_local_scalar_dense|Cannot access data pointer|"
    r"cannot be called on meta|FakeTensor",
    re.IGNORECASE,
)


def needs_values(error: str) -> bool:
    """Whether an error of running ``forward`` says that a tensor had no values (meta or fake
    tensors at ``.item()`` or a branch), rather than that the module itself fails."""
    return bool(_NEEDS_VALUES.search(error))
