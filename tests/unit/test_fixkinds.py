"""The registry of fix kinds is the one list: the protocol's FixKind, the worker's modules,
the engine's "fix all" and the docs agree with it."""

from __future__ import annotations

import keyword
from pathlib import Path
from typing import get_args

from fxls.engine.fixes import Candidate
from fxls.protocol import catalogue
from fxls.protocol.fixkinds import BY_KIND, FIX_ALL_KINDS, FIX_KINDS, PIN_KINDS
from fxls.protocol.model import FixKind, Span

ROOT = Path(__file__).resolve().parents[2]


def test_fixkind_lists_the_registry() -> None:
    assert set(get_args(FixKind)) == set(BY_KIND)
    assert len(BY_KIND) == len(FIX_KINDS)


def test_every_kind_has_its_module_named_after_it() -> None:
    folder = ROOT / "fxls" / "worker" / "rewrite" / "fixes"
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert modules == {k.module for k in FIX_KINDS}
    for kind in FIX_KINDS:  # the registry names what the worker imports (no torch needed)
        assert (folder / f"{kind.module}.py").read_text().count("def propose(") == 1, kind


def test_codes_exist_and_pins_and_fix_all_follow_the_registry() -> None:
    codes = set(catalogue.ALL_MESSAGES)
    for kind in FIX_KINDS:
        for code in kind.codes:
            assert code == "FX1xx" or code in codes, (kind.kind, code)
    assert PIN_KINDS <= FIX_ALL_KINDS
    cand = Candidate("x", "length", "Net", Span(1, 0, 1, 1), "t")
    assert cand.fix_all and not Candidate("y", "attention", "Net", Span(1, 0, 1, 1), "t").fix_all


def test_the_docs_name_every_kind() -> None:
    text = (ROOT / "docs" / "code-actions.md").read_text()
    for kind in FIX_KINDS:
        assert f"`{kind.kind}`" in text, f"docs/code-actions.md does not name `{kind.kind}`"


def test_module_names_are_importable_names() -> None:
    for kind in FIX_KINDS:
        assert kind.module.isidentifier() and not keyword.iskeyword(kind.module), kind
