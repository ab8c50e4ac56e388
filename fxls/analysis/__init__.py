"""Pure AST analysis of a document: module classes, ``forward`` ranges, directives, jaxtyping.

Never imports torch or lsprotocol and never executes user code.
"""

from fxls.analysis.classes import (
    ClassInfo,
    ForwardInfo,
    ForwardParam,
    ParseResult,
    PassInfo,
    SyntaxErrorInfo,
    find_classes,
    parse,
)
from fxls.analysis.directives import (
    Directive,
    DirectiveError,
    Directives,
    parse_directive,
    parse_init,
    parse_input_spec,
)

__all__ = [
    "ClassInfo",
    "Directive",
    "DirectiveError",
    "Directives",
    "ForwardInfo",
    "ForwardParam",
    "ParseResult",
    "PassInfo",
    "SyntaxErrorInfo",
    "find_classes",
    "parse",
    "parse_directive",
    "parse_init",
    "parse_input_spec",
]
