"""How many values a starred traced value must give, read off the code that unpacks it.

``b, n, _, h = *x.shape, self.heads`` (lucidrains' models, in most of their attention layers)
builds a list of ``x.shape``'s values and one more and unpacks it into four names: for the
statement to run at all, ``x.shape`` must give exactly three values, whatever the sizes.
torch.fx refuses to iterate a traced value (it only unpacks one straight into names); the
bytecode says the count: :func:`starred_count` reads the list the value extends, from the
instruction that builds it to the ``UNPACK_SEQUENCE`` of the tuple made of it, counting the
values put in before and after. Anything else in between (another starred value, a jump)
leaves the count unknown.
"""

from __future__ import annotations

import dis
import functools
from types import CodeType

_PLAIN = frozenset(
    {
        "LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_CONST",
        "LOAD_ATTR", "LOAD_METHOD", "BINARY_SUBSCR", "BUILD_SLICE", "BUILD_TUPLE", "BINARY_OP",
        "UNARY_NEGATIVE", "PRECALL", "CALL", "PUSH_NULL", "KW_NAMES", "LIST_APPEND",
        "BUILD_LIST", "NOP",
    }
)  # fmt: skip
"""Straight-line instructions the values of the list may be made of."""


@functools.lru_cache(maxsize=256)
def _instructions(code: CodeType) -> tuple[dis.Instruction, ...]:
    return tuple(dis.get_instructions(code))


def extends_a_list(code: CodeType, lasti: int) -> bool:
    """Whether the instruction at ``lasti`` of ``code`` extends a list by a starred value
    (``[*x.shape, h]``): it asks the value's ``len`` only as a hint of the list's size."""
    return _at(code, lasti) is not None


def _at(code: CodeType, lasti: int) -> int | None:
    insts = _instructions(code)
    at = next((i for i, ins in enumerate(insts) if ins.offset == lasti), None)
    if at is None or insts[at].opname != "LIST_EXTEND" or insts[at].arg != 1:
        return None
    return at


def starred_count(code: CodeType, lasti: int) -> int | None:
    """At the ``LIST_EXTEND`` at ``lasti`` of ``code``: how many values its iterable must give
    for the ``UNPACK_SEQUENCE`` of the list (made a tuple) to succeed, else None."""
    at = _at(code, lasti)
    if at is None:
        return None
    insts = _instructions(code)
    before = _put_before(insts, at)
    after = _put_after(insts, at, "UNPACK_SEQUENCE")
    if before is None or after is None:
        return None
    count = after[1] - before - after[0]
    return count if count >= 0 else None


def least_count(code: CodeType, lasti: int) -> int | None:
    """At an unpacking into a starred name, the fewest values the iterated value must give
    for it to run (more go to the starred name), else None: ``batch, n, *_ = x.shape`` (the
    ``UNPACK_EX`` at ``lasti``): two; ``*_, n, dtype = *x.shape, x.dtype`` (the
    ``LIST_EXTEND`` at ``lasti`` of the list that is unpacked): one."""
    insts = _instructions(code)
    at = next((i for i, ins in enumerate(insts) if ins.offset == lasti), None)
    if at is None:
        return None
    if insts[at].opname == "UNPACK_EX":
        return _named(insts[at].arg or 0)
    if _at(code, lasti) is None:
        return None
    before = _put_before(insts, at)
    after = _put_after(insts, at, "UNPACK_EX")
    if before is None or after is None:
        return None
    return max(_named(after[1]) - before - after[0], 0)


def _named(arg: int) -> int:
    """The names an ``UNPACK_EX`` with ``arg`` binds besides the starred one."""
    return (arg & 0xFF) + (arg >> 8)


def _effect(ins: dis.Instruction) -> int | None:
    """The instruction's net stack effect when it is a plain one, else None."""
    if ins.opname not in _PLAIN or ins.is_jump_target:
        return None
    try:
        return dis.stack_effect(ins.opcode, ins.arg, jump=False)
    except ValueError:
        return None


def _put_before(insts: tuple[dis.Instruction, ...], at: int) -> int | None:
    """The values in the list when the value at ``at`` extends it: the ``BUILD_LIST``'s
    (values put in after a starred one are appended, so none come between)."""
    height = 0  # over the stack at ``at``: its iterable on top, the list under it (-1)
    for ins in reversed(insts[:at]):
        effect = _effect(ins)
        if effect is None or ins.opname == "LIST_APPEND":
            return None
        if height == -1:  # ``ins`` left the list's slot on top: it made what is there
            return ins.arg if ins.opname == "BUILD_LIST" else None
        height -= effect
    return None


def _put_after(
    insts: tuple[dis.Instruction, ...], at: int, unpacking: str
) -> tuple[int, int] | None:
    """(values appended to the list after ``at``, the argument of the ``unpacking``
    instruction, ``UNPACK_SEQUENCE`` or ``UNPACK_EX``, of the tuple made of it)."""
    height = 0  # over the stack after ``at``: the list on top
    appended = 0
    for i in range(at + 1, len(insts)):
        ins = insts[i]
        if height == 0 and ins.opname == "LIST_TO_TUPLE":
            following = next((n for n in insts[i + 1 :] if n.opname != "EXTENDED_ARG"), None)
            if following is None or following.opname != unpacking:
                return None
            return appended, following.arg or 0
        effect = _effect(ins)
        if effect is None:
            return None
        if ins.opname == "LIST_APPEND":
            if ins.arg != 1 or height != 1:
                return None  # into another list
            appended += 1
        height += effect
        if height < 0:
            return None
    return None
