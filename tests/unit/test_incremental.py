"""Units and keys of incremental captures (fxls.engine.incremental), without the worker."""

from __future__ import annotations

import pickle

from fxls.analysis import parse
from fxls.engine import analyze as engine
from fxls.engine import incremental
from fxls.protocol.codec import from_dict, to_dict
from fxls.protocol.copies import expanded
from fxls.protocol.model import Arg, Diagnostic, ModuleResult, NodeInfo, Span

BASE = """\
import torch
from torch import nn

WIDTH = 8


class A(nn.Module):
    def forward(self, x):
        return torch.relu(x) * WIDTH


class B(nn.Module):
    def forward(self, x):
        return x + 1


class C(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = B()

    def forward(self, x):
        return self.b(x) * 2


def helper(y):
    return y
"""


def units(text: str, context: str = "ctx") -> dict[str, incremental.Unit]:
    parsed = parse(text)
    found = incremental.units_of(text, engine.build_requests(parsed.classes), context)
    assert found is not None
    return {name: unit for unit in found for name in unit.classes}


def keys(text: str) -> dict[str, str]:
    return {name: unit.key for name, unit in units(text).items()}


def test_units_follow_the_names_classes_share() -> None:
    found = units(BASE)
    assert found["A"].classes == ["A"]
    assert found["B"].classes == ["B", "C"] and found["C"] is found["B"]


def test_comments_blank_lines_and_trailing_spaces_change_no_key() -> None:
    before = keys(BASE)
    edited = BASE.replace("class B", "# about B\n\n\nclass B").replace(
        "return x + 1", "return x + 1  # one   "
    )
    assert keys(edited) == before
    moved = units(edited)["B"].lines
    assert moved != units(BASE)["B"].lines and len(moved) == len(units(BASE)["B"].lines)


def test_an_edit_changes_the_key_of_its_unit_only() -> None:
    before = keys(BASE)
    after = keys(BASE.replace("return x + 1", "return x + 2"))
    assert after["A"] == before["A"]
    assert after["B"] != before["B"] and after["C"] != before["C"]
    assert keys(BASE.replace("return y", "return y * 2")) == before, "helper is used by none"


def test_module_level_code_and_the_context_change_every_key() -> None:
    before = keys(BASE)
    after = keys(BASE.replace("WIDTH = 8", "WIDTH = 9"))
    assert all(after[name] != before[name] for name in before)
    other = {n: u.key for n, u in units(BASE, context="other settings").items()}
    assert all(other[name] != before[name] for name in before)


def test_directives_are_part_of_the_key() -> None:
    before = keys(BASE)
    after = keys(BASE.replace("class A(nn.Module):", "# fxls: x = (2, 8)\nclass A(nn.Module):"))
    assert after["A"] != before["A"] and after["B"] == before["B"]


def test_a_shared_module_level_object_joins_units_imports_do_not() -> None:
    joined = units(BASE.replace("return x + 1", "return x + WIDTH"))
    assert joined["A"] is joined["B"]
    apart = units(BASE)
    assert apart["A"] is not apart["B"], "torch and nn connect nothing"


def test_dynamic_access_and_global_state_make_one_unit() -> None:
    for code in (
        "globals()['B']",
        "setattr(self, 'k', 1)",
        "torch.set_default_dtype(torch.float64)",
        "nn.Linear.extra = 1",
        "sys.modules['x']",
    ):
        text = BASE.replace("return torch.relu(x) * WIDTH", f"{code}\n        return x")
        found = units(text)
        assert found["A"] is found["B"], code


def test_self_modules_is_not_dynamic_access() -> None:
    text = BASE.replace(
        "return torch.relu(x) * WIDTH", "n = len(list(self.modules()))\n        return x"
    )
    found = units(text)
    assert found["A"] is not found["B"]


def test_decorated_definitions_run_at_import_for_every_class() -> None:
    text = BASE.replace("def helper(y)", "@torch.no_grad()\ndef helper(y)")
    before = keys(text)
    after = keys(text.replace("return y", "return y * 2"))
    assert all(after[name] != before[name] for name in before)


def test_the_main_block_is_a_call_site_not_import_code() -> None:
    text = BASE + '\n\nif __name__ == "__main__":\n    print(A()(torch.ones(2)))\n'
    before = keys(text)
    after = keys(text.replace("torch.ones(2)", "torch.ones(3)"))
    assert after["A"] != before["A"] and after["B"] == before["B"]


def test_factories_of_different_units_share_one() -> None:
    text = BASE + "\n\ndef make_a():\n    return A()\n\n\ndef make_c():\n    return C()\n"
    found = units(text)
    assert found["A"] is found["C"]


def test_relocate_moves_spans_and_refuses_line_numbers_in_words() -> None:
    unit = units(BASE)["B"]
    line = unit.lines[3]
    module = ModuleResult(
        name="B",
        line=line,
        status="traced",
        nodes=[
            NodeInfo(name="add", op="call_function", target="add", span=Span(line, 8, line, 13))
        ],
        diagnostics=[Diagnostic("FX302", "warning", "unused", Span(line, 8, line, 13))],
    )
    entry = incremental.store([module], unit, ["seccomp"], "2.13")
    shifted = incremental.Unit(unit.classes, unit.key, [n + 2 for n in unit.lines])
    moved = incremental.relocate(entry, shifted)
    assert moved is not None
    assert moved[0].line == line + 2 and moved[0].nodes[0].span == Span(line + 2, 8, line + 2, 13)
    assert moved[0].diagnostics[0].span.line == line + 2
    module.notes = [f"inputs from the call at line {line}"]
    worded = incremental.store([module], unit, [], None)
    assert incremental.relocate(worded, shifted) is None
    assert incremental.relocate(worded, unit) is not None, "lines did not move"
    module.notes = []
    module.nodes[0].span = Span(3, 0, 3, 0)  # a blank line: not one the key reads
    assert incremental.relocate(incremental.store([module], unit, [], None), shifted) is None


def test_copied_records_are_cached_as_they_came_and_come_back_whole() -> None:
    # a result decoded as sent is pickled as the copies (incremental.store) and comes back
    # as them, with the lines moved, from relocate: expanded, the same records as expanding
    # the decoded result
    unit = units(BASE)["B"]
    line = unit.lines[3]
    template = NodeInfo(
        name="fc", op="call_module", target="h.0.fc", span=Span(line, 8, line, 13),
        module_path="h.0", users=1, inputs=["x"], args=[Arg("input", "x", node="x")],
    )  # fmt: skip
    sent = {
        "name": "B", "line": line, "status": "traced",
        "nodes": [to_dict(NodeInfo(name="x", op="placeholder", target="x", users=2)),
                  to_dict(template)],
        "block_copies": [{"at": 2, "of": 1, "names": ["fc_1"], "template_path": "h.0",
                          "path": "h.1", "users": [0]}],
    }  # fmt: skip
    decoded = from_dict(ModuleResult, sent)
    assert [n.name for n in decoded.nodes] == ["x", "fc"] and decoded.block_copies  # as sent
    whole = expanded(decoded)
    assert [n.name for n in whole.nodes] == ["x", "fc", "fc_1"]
    assert whole.nodes[2].target == "h.1.fc" and whole.nodes[2].span == template.span
    entry = incremental.store([decoded], unit, [], None)
    pickled = pickle.dumps([whole], protocol=pickle.HIGHEST_PROTOCOL)
    assert b"h.1.fc" in pickled and b"h.1.fc" not in entry.modules  # the copy, not its record
    same = incremental.relocate(entry, unit)
    assert same is not None and same[0].block_copies == decoded.block_copies
    assert expanded(same[0]).nodes == whole.nodes
    shifted = incremental.Unit(unit.classes, unit.key, [n + 2 for n in unit.lines])
    moved = incremental.relocate(entry, shifted)
    assert moved is not None
    spans = [n.span for n in expanded(moved[0]).nodes[1:]]
    assert spans == [Span(line + 2, 8, line + 2, 13)] * 2
    assert to_dict(decoded) == to_dict(from_dict(ModuleResult, sent)), "the decoded one kept"


def test_the_cache_is_bounded() -> None:
    cache = incremental.CaptureCache(max_bytes=10_000, max_entries=3)
    unit = units(BASE)["A"]
    for i in range(5):
        cache.put(str(i), incremental.store([ModuleResult("A", 7, "traced")], unit, [], None))
    assert len(cache) == 3 and cache.get("0") is None and cache.get("4") is not None
    big = ModuleResult("A", 7, "traced", notes=["x" * 20_000])
    cache.put("big", incremental.store([big], unit, [], None))
    assert cache.get("big") is None and cache.bytes <= 10_000


def test_a_user_pass_joins_its_function_to_the_class_and_moves_with_it() -> None:
    text = BASE + "\n\n# fxls: pass A\ndef drop(gm):\n    return gm\n"
    found = units(text)
    assert found["A"] is not found["B"]
    before = keys(text)
    after = keys(text.replace("    return gm", "    gm.graph.lint()\n    return gm"))
    assert after["A"] != before["A"] and after["B"] == before["B"]
    assert keys(text.replace("class A", "# about A\nclass A")) == before
    from fxls.protocol.model import PassResult

    unit = found["A"]
    def_line = next(i for i, t in enumerate(text.split("\n"), 1) if t.startswith("def drop"))
    module = ModuleResult("A", 7, "traced", passes=[PassResult("drop", def_line, "ok")])
    shifted = incremental.Unit(unit.classes, unit.key, [n + 1 for n in unit.lines])
    moved = incremental.relocate(incremental.store([module], unit, [], None), shifted)
    assert moved is not None and moved[0].passes[0].line == def_line + 1


def test_units_are_the_same_whether_statements_were_walked_before_or_not() -> None:
    texts = [BASE, BASE.replace("return x + 1", "return x + 2")]
    texts += [
        BASE.replace("return torch.relu(x) * WIDTH", f"{code}\n        return x")
        for code in ("globals()['B']", "torch.manual_seed(0)", "cfg.extra = 1")
    ]
    # the same statement stores into an imported module in one text, into a variable in another
    imported = texts[-1].replace("WIDTH = 8\n", "WIDTH = 8\nimport cfg\n")
    bound = texts[-1].replace("WIDTH = 8\n", "WIDTH = 8\ncfg = object()\n")
    for text in [*texts, imported, bound]:
        warm = {name: (u.key, u.lines) for name, u in units(text).items()}
        incremental._REACHES.clear()
        assert {name: (u.key, u.lines) for name, u in units(text).items()} == warm
    found = units(imported)
    assert found["A"] is found["B"]
    found = units(bound)
    assert found["A"] is not found["B"]
