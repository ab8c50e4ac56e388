"""Python decisions on tensor values in a run on fake tensors, taken one way and said.

``if not padding_mask.any():`` (ESM-2 drops a mask without padding), ``assert (t >= 0).all()``,
``if torch.isnan(x).any(): raise``: a fake tensor has no values, so ``bool()`` of one raises
torch's data-dependent guard error, and a run of ``forward`` on fake tensors stopped there
with no output. With :class:`Branches`, such a condition is taken one way and ``forward`` runs
again from the start: an ``assert`` (or ``torch._assert``) as holding, any other condition as
false (no padding, no NaN, a ``while`` loop ends). Each decision is kept by its place in the
code (code object and instruction), so every later run, and every pass of a loop, takes it the
same way; at most :data:`MAX_DECISIONS` are taken. The shapes after a decision are those of the
branch taken, and the capture says so where the condition is.
"""

from __future__ import annotations

import dis
import functools
import itertools
import os
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

import torch

MAX_DECISIONS = 4
"""Conditions on tensor values one capture takes a way (each costs a run of ``forward``)."""
MAX_PASSES = 100
"""Times one run may take one decision: more is a loop it does not end (``while not
done.all():`` taken as false), and the decision is taken the other way once (a check in a
block's code is taken once per block: deeper models than this are rare)."""


class EndlessLoop(RuntimeError):
    """A decision taken :data:`MAX_PASSES` times in one run: a loop it does not end."""


_TORCH = os.path.dirname(torch.__file__) + os.sep
TENSOR_BOOL = torch.Tensor.__bool__
"""What ``if t:`` and ``bool(t)`` call (a torch function mode sees it)."""

Site = tuple[CodeType, int]
"""Where a condition is: the code object and the instruction that asked for the bool."""


@dataclass
class Decision:
    """A condition on tensor values taken one way."""

    site: Site
    value: bool
    tensor: Any = None
    """The tensor the last run asked the truth of here (its node names the condition)."""

    @property
    def filename(self) -> str:
        return self.site[0].co_filename

    @property
    def frame_line(self) -> int:
        """The line of the condition in its file."""
        code, offset = self.site
        return next(
            (n for start, end, n in code.co_lines() if start <= offset < end and n is not None),
            code.co_firstlineno,
        )


@dataclass
class Branches:
    """The decisions of one capture's runs of ``forward`` (see the module's docstring)."""

    taken: dict[Site, Decision] = field(default_factory=dict)
    pending: Decision | None = None
    """The condition the last run stopped at, with the value to take it as."""
    used: list[Decision] = field(default_factory=list)
    """The decisions the last run took, in the order it first met them."""
    asked: list[Any] = field(default_factory=list)
    """The tensors the last run asked ``bool()`` of: what computed them is used."""
    passes: dict[Site, int] = field(default_factory=dict)
    """Times the last run took each decision (:data:`MAX_PASSES`)."""
    endless: Decision | None = None
    """The decision the last run stopped at as a loop it does not end."""
    flipped: set[Site] = field(default_factory=set)
    """Decisions taken the other way after a loop they did not end (once each)."""

    def start(self) -> None:
        """A new run of ``forward``: what the last one took and asked is its own."""
        self.used, self.asked, self.passes, self.endless = [], [], {}, None

    def bool_of(self, func: Any, args: Any, kwargs: dict[str, Any], frame: FrameType | None) -> Any:
        """``bool()`` of a tensor in the run: the decision taken at this place, else what
        torch says; a data-dependent one leaves :attr:`pending` set before it raises."""
        site, asserted = _site(frame)
        return self._decide(func, args, kwargs, site, asserted)

    def assertion(self, args: Any, kwargs: dict[str, Any], frame: FrameType | None) -> None:
        """``torch._assert(condition, message)`` in the run: the condition is asked as an
        assertion at the caller's place (it holds once taken), and fails as torch's does."""
        condition = args[0] if args else kwargs.get("condition")
        message = args[1] if len(args) > 1 else kwargs.get("message", "")
        if not isinstance(condition, torch.Tensor):
            assert condition, message  # what torch._assert does
            return
        while frame is not None and frame.f_code.co_filename.startswith(_TORCH):
            frame = frame.f_back  # torch's own dispatch to the mode (``handle_torch_function``)
        site, _ = _site(frame)
        if not self._decide(TENSOR_BOOL, (condition,), {}, site, True):
            raise AssertionError(message)

    def _decide(
        self, func: Any, args: Any, kwargs: dict[str, Any], site: Site | None, asserted: bool
    ) -> Any:
        if args:
            self.asked.append(args[0])
        decided = self.taken.get(site) if site is not None else None
        if decided is not None:
            self.passes[decided.site] = passes = self.passes.get(decided.site, 0) + 1
            if passes > MAX_PASSES:
                self.endless = decided
                raise EndlessLoop(
                    f"a condition on tensor values at line {decided.frame_line} was taken as "
                    f"{decided.value} {MAX_PASSES} times: a loop that does not end so"
                )
            if decided not in self.used:
                decided.tensor = args[0] if args else None
                self.used.append(decided)
            return decided.value
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            if site is not None and "DataDependent" in type(exc).__name__:
                self.pending = Decision(site, asserted)
            raise

    def again(self) -> bool:
        """Take the pending decision for the next run (or, after a loop a decision did not
        end, that decision the other way); whether there is one to take (and room for it)."""
        endless, self.endless = self.endless, None
        if endless is not None and endless.site not in self.flipped:
            self.flipped.add(endless.site)
            endless.value = not endless.value
            return True
        pending, self.pending = self.pending, None
        if pending is None or len(self.taken) >= MAX_DECISIONS or pending.site in self.taken:
            return False
        self.taken[pending.site] = pending
        return True


def _site(frame: FrameType | None) -> tuple[Site | None, bool]:
    """The place of the code that asked for the bool, and whether it is the test of an
    ``assert`` there; None for a check inside torch's own code (not the user's to take;
    ``torch._assert`` reaches :meth:`Branches.assertion` instead)."""
    if frame is None or frame.f_code.co_filename.startswith(_TORCH):
        return None, False
    site = (frame.f_code, frame.f_lasti)
    return site, _raises_assertion(*site)


@functools.lru_cache(maxsize=256)
def _after(code: CodeType) -> dict[int, str]:
    """Offset of each instruction of ``code`` -> the name of the instruction after it."""
    instructions = list(dis.get_instructions(code))
    return {a.offset: b.opname for a, b in itertools.pairwise(instructions)}


def _raises_assertion(code: CodeType, offset: int) -> bool:
    """Whether the instruction at ``offset`` is the test of an ``assert`` (the next one
    loads ``AssertionError``)."""
    try:
        return _after(code).get(offset) == "LOAD_ASSERTION_ERROR"
    except Exception:  # code dis cannot read: not an assertion
        return False
