"""Rewrites in-process: each fix on its before/after fixture, and the gates of verification.

``run_rewrite`` executes user code, as the sandboxed child does; here it runs in the test
process on the fixtures of ``tests/fixtures/rewrites``. One test sends a rewrite job through
the real zygote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from fxls.analysis import parse, parse_directive
from fxls.protocol.codec import from_dict, to_dict
from fxls.protocol.edits import apply_edits
from fxls.protocol.labels import strategy_label
from fxls.protocol.model import (
    CaptureJob,
    CaptureResult,
    FixOutcome,
    FixRequest,
    RewriteJob,
    Span,
    TextEdit,
)
from fxls.worker.capture.pipeline import capture_document
from fxls.worker.rewrite.base import Original, Unavailable
from fxls.worker.rewrite.fixes import directive
from fxls.worker.rewrite.run import run_rewrite
from fxls.worker.rewrite.verify import Change, LineShift, randomize, verify

FIXTURES = Path(__file__).parents[2] / "fixtures" / "rewrites"


def _job(name: str, text: str | None = None) -> CaptureJob:
    path = FIXTURES / name
    text = path.read_text() if text is None else text
    classes = [c.request() for c in parse(text).classes]
    return CaptureJob(path=str(path), source=text, classes=classes, sys_path=[str(FIXTURES)])


def _diagnostic(job: CaptureJob, cls: str, code: str, nth: int = 0) -> Any:
    _, result = capture_document(job, lambda *a: None)
    mod = next(m for m in result.modules if m.name == cls)
    return [d for d in mod.diagnostics if d.code == code][nth]


def _rewrite(job: CaptureJob, *fixes: FixRequest, **kwargs: Any) -> CaptureResult:
    result = run_rewrite(job, RewriteJob(fixes=list(fixes), **kwargs), lambda *a: None)
    assert from_dict(CaptureResult, to_dict(result)) == result  # survives the wire
    assert result.rewrite is not None
    return result


def _fix(kind: str, cls: str, span: Span, code: str | None = None, **params: Any) -> FixRequest:
    return FixRequest(id=f"{kind}:{cls}", kind=kind, cls=cls, span=span, code=code, params=params)  # type: ignore[arg-type]


def _one(job: CaptureJob, fix: FixRequest, **kwargs: Any) -> FixOutcome:
    result = _rewrite(job, fix, **kwargs)
    assert result.rewrite is not None
    (outcome,) = result.rewrite.outcomes
    return outcome


# ---------------------------------------------------------------------------------------
# Each rewrite
# ---------------------------------------------------------------------------------------


def test_dead_code_removes_the_statement_and_verifies_outputs() -> None:
    job = _job("dead_code_before.py")
    diag = _diagnostic(job, "Head", "FX302")
    outcome = _one(job, _fix("dead-code", "Head", diag.span, "FX302"))
    assert outcome.applicability == "safe", outcome.reason
    assert outcome.title == "Remove unused `wasted = self.fc2(h).relu()`"
    new = apply_edits(job.source, outcome.edits)
    assert "wasted" not in new
    assert new.count("\n") == job.source.count("\n") - 1
    assert any("computes the same" in c and "[3, 8]" in c for c in outcome.checks), outcome.checks


def test_dead_code_refuses_in_place_reads_and_stores() -> None:
    job = _job("unsafe_before.py")
    # `h.mul_(2)` has no users in the graph, but it is not unused: no FX302 there, and a
    # request to remove it anyway (an old diagnostic, another client) is refused
    lines = job.source.split("\n")
    line = lines.index("        h.mul_(2)") + 1
    diag = _diagnostic(job, "InPlace", "FX302")
    assert diag.span.line == lines.index("        self.fc(h).mul_(2)") + 1
    outcome = _one(job, _fix("dead-code", "InPlace", Span(line, 8, line, 17), "FX302"))
    assert outcome.applicability == "unavailable" and "in place" in outcome.reason
    assert outcome.edits == []
    # the unused `self.fc(h)` is in a statement that also works in place: refused as well
    outcome = _one(job, _fix("dead-code", "InPlace", diag.span, "FX302"))
    assert outcome.applicability == "unavailable" and "`mul_` works in place" in outcome.reason

    text = (FIXTURES / "dead_code_before.py").read_text()
    text = text.replace(
        "return self.fc2(F.relu(kept))", "return self.fc2(F.relu(kept)) + 0 * len(str(wasted))"
    )
    job = _job("dead_code_read_later.py", text)
    line = text.split("\n").index("        wasted = self.fc2(h).relu()") + 1
    span = Span(line, 17, line, 35)
    outcome = _one(job, _fix("dead-code", "Head", span, "FX302"))
    assert outcome.applicability == "unavailable"
    assert "read later" in outcome.reason or "used" in outcome.reason


def test_trace_fixits_each_verified_by_plain_fx() -> None:
    job = _job("trace_fixits_before.py")
    after = (FIXTURES / "trace_fixits_after.py").read_text()
    fixes = [
        _fix("assertion", "Checked", _diagnostic(job, "Checked", "FX101").span, "FX101"),
        _fix("length", "Averaged", _diagnostic(job, "Averaged", "FX102").span, "FX102"),
        _fix("new-tensor", "Recurrent", _diagnostic(job, "Recurrent", "FX105").span, "FX105"),
        _fix("new-tensor", "TokenState", _diagnostic(job, "TokenState", "FX105").span, "FX105"),
    ]
    for i, fix in enumerate(fixes):
        fix.id = f"fix{i}"
    result = _rewrite(job, *fixes, combine=True)
    assert result.rewrite is not None
    for outcome in result.rewrite.outcomes:
        assert outcome.applicability == "safe", (outcome.id, outcome.reason)
        assert any("torch.fx" in c for c in outcome.checks), outcome.checks
    combined = result.rewrite.combined
    assert combined is not None and combined.applicability == "safe"
    assert sorted(combined.fixes) == ["fix0", "fix1", "fix2", "fix3"]
    assert apply_edits(job.source, combined.edits) == after


def test_new_tensor_keeps_the_default_dtype_when_the_size_tensor_is_integer() -> None:
    """``tokens.new_zeros(...)`` would be int64: the plain form raises in GRUCell, so the
    form with ``dtype=torch.float32`` is the one that verifies."""
    job = _job("trace_fixits_before.py")
    span = _diagnostic(job, "TokenState", "FX105").span
    outcome = _one(job, _fix("new-tensor", "TokenState", span, "FX105"))
    assert outcome.applicability == "safe"
    new = apply_edits(job.source, outcome.edits)
    assert "h = tokens.new_zeros((tokens.size(0), 16), dtype=torch.float32)" in new


def test_directives_pin_what_was_assumed() -> None:
    job = _job("directives_before.py")
    init = _diagnostic(job, "Classifier", "FX408")
    x = _diagnostic(job, "Classifier", "FX405")
    flag = _diagnostic(job, "Gate", "FX101")
    leaf = _diagnostic(job, "Outer", "FX101")
    assert flag.data["concrete"] == "use_inner" and leaf.data["leaf"] == "Inner"
    fixes = [
        _fix("directive", "Classifier", init.span, "FX408", what="init"),
        _fix("directive", "Classifier", x.span, "FX405", what="input", arg="x"),
        _fix("concrete", "Gate", flag.span, "FX101", args="use_inner"),
        _fix("leaf", "Outer", leaf.span, "FX101", leaf="Inner"),
    ]
    for i, fix in enumerate(fixes):
        fix.id = f"fix{i}"
    result = _rewrite(job, *fixes, combine=True)
    assert result.rewrite is not None
    titles = [o.title for o in result.rewrite.outcomes]
    assert titles == [
        "Pin the constructor arguments: `# fxls: init(in_features=64)`",
        "Pin the assumed input: `# fxls: x = (B=2, 64)`",
        "Trace `Gate` with `# fxls: use_inner = False`",
        "Keep `Inner` as a leaf of `Outer`: `# fxls: leaf Inner`",
    ]
    assert all(o.applicability == "safe" for o in result.rewrite.outcomes), [
        o.reason for o in result.rewrite.outcomes
    ]
    combined = result.rewrite.combined
    assert combined is not None
    new = apply_edits(job.source, combined.edits)
    assert "# fxls: init(in_features=64)\n# fxls: x = (B=2, 64)\nclass Classifier" in new
    assert "# fxls: use_inner = False\nclass Gate" in new
    assert "# fxls: leaf Inner\nclass Outer" in new


def test_pinning_an_input_that_turns_a_hint_into_an_error_is_refused() -> None:
    """``Outer``'s assumed input gives a shape hint inside its leaf; declared, it would be an
    FX201 error: the pin is not offered."""
    job = _job("directives_before.py")
    x = _diagnostic(job, "Outer", "FX405")
    outcome = _one(job, _fix("directive", "Outer", x.span, "FX405", what="input", arg="x"))
    assert outcome.applicability == "unavailable"
    assert "FX201" in outcome.reason


def test_directive_text_reads_back_as_the_same_request() -> None:
    """What the worker pins is what the server's directive parser reads from the line."""
    job = _job("directives_before.py")
    doc, result = capture_document(job, lambda *a: None)
    original = Original(doc, result)
    body, spec = directive.input_directive(original, "Classifier", "x")
    parsed = parse_directive(body)
    assert parsed.input is not None
    assert (parsed.input.name, parsed.input.kind, parsed.input.dims, parsed.input.dtype) == (
        spec.name,
        spec.kind,
        spec.dims,
        spec.dtype,
    )
    body, spec = directive.value_directive("flag", (1, 2.5, None, "a"))
    parsed = parse_directive(body)
    assert parsed.input is not None and parsed.input.expr == spec.expr == "(1, 2.5, None, 'a')"


def test_an_input_left_none_is_declared_with_the_suggested_shape() -> None:
    """FX402 for ``timestep`` left at ``None`` (``Denoiser``, as Flux's transformer): the
    fix declares it as suggested; verified by capturing again, where that FX402 is gone and
    the next stop names the position ids."""
    job = _job("declare_before.py")
    left = _diagnostic(job, "Denoiser", "FX402")
    assert (left.data["arg"], left.data["declare"]) == ("timestep", "(B,) int64")
    fix = _fix("directive", "Denoiser", left.span, "FX402", what="declare", arg="timestep",
               shape="(B,) int64")  # fmt: skip
    outcome = _one(job, fix)
    assert outcome.title == "Declare the input: `# fxls: timestep = (B,) int64`"
    assert outcome.applicability == "safe", outcome.reason
    new = apply_edits(job.source, outcome.edits)
    assert "# fxls: timestep = (B,) int64\nclass Denoiser" in new
    job = _job("declare_before.py", new)
    assert _diagnostic(job, "Denoiser", "FX402").data["arg"] == "ids"


def test_a_fix_in_a_file_of_a_package_is_verified_on_its_edited_text(tmp_path: Path) -> None:
    """A file of a package runs as its module; the edited text must run as that module too,
    not the original's module imported before in the same process (every fix of diffusers'
    ``transformer_flux.py`` was refused: "`FluxAttention` no longer builds")."""
    package = tmp_path / "fxls_rewrite_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    text = (FIXTURES / "directives_before.py").read_text()
    (package / "models.py").write_text(text)
    classes = [c.request() for c in parse(text).classes]
    job = CaptureJob(path=str(package / "models.py"), source=text, classes=classes,
                     sys_path=[str(tmp_path)], module="fxls_rewrite_pkg.models")  # fmt: skip
    x = _diagnostic(job, "Classifier", "FX405")
    outcome = _one(job, _fix("directive", "Classifier", x.span, "FX405", what="input", arg="x"))
    assert outcome.applicability == "safe", outcome.reason
    assert "# fxls: x = (B=2, 64)\nclass Classifier" in apply_edits(text, outcome.edits)


def test_a_declared_input_reads_back_as_the_same_request() -> None:
    for arg, shape in (("timestep", "(B,) int64"), ("x", "(B, 3, 224, 224)"), ("m", "(B, T, T) bool")):  # fmt: skip
        body, spec = directive.declared(arg, shape)
        parsed = parse_directive(body)
        assert parsed.input is not None
        got = (parsed.input.name, parsed.input.kind, parsed.input.dims, parsed.input.dtype)
        assert got == (spec.name, spec.kind, spec.dims, spec.dtype), body
    # what the server passes on is checked: a name, a shape of names and sizes, a dtype
    for arg, shape in (("x", "(B, T); import os"), ("x.y", "(B,)"), ("x", "(B,) os"), ("x", "()"),
                       ("x", "(B, ²)"), ("x", "(B, \u0661)")):  # fmt: skip
        with pytest.raises(Unavailable):
            directive.declared(arg, shape)


def test_name_every_argument_keeps_the_expressions() -> None:
    text = (FIXTURES / "dead_code_after.py").read_text()
    job = _job("name_args.py", text)
    _, result = capture_document(job, lambda *a: None)
    mod = result.modules[0]
    relu = next(n for n in mod.nodes if n.target.endswith("relu"))
    fc2 = next(n for n in mod.nodes if n.target == "fc2")
    assert relu.span is not None and fc2.span is not None
    outcome = _one(job, _fix("name-args", "Head", relu.span))
    assert outcome.applicability == "safe", outcome.reason
    new = apply_edits(text, outcome.edits)
    assert "return self.fc2(F.relu(input=kept))" in new
    outcome = _one(job, _fix("name-args", "Head", fc2.span))
    assert outcome.applicability == "safe", outcome.reason
    assert "return self.fc2(input=F.relu(kept))" in apply_edits(text, outcome.edits)


# ---------------------------------------------------------------------------------------
# The gates
# ---------------------------------------------------------------------------------------


def _original(name: str, text: str | None = None) -> Original:
    doc, result = capture_document(_job(name, text), lambda *a: None)
    return Original(doc, result)


def _replace(text: str, old: str, new: str) -> TextEdit:
    offset = text.index(old)
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1)
    return TextEdit(Span(line, col, line, col + len(old)), new)


def test_an_edit_that_changes_results_is_unsafe_with_a_counterexample() -> None:
    original = _original("dead_code_after.py")
    edit = _replace(original.source, "kept = h * 2", "kept = h * 3")
    verdict = verify(original, Change([edit], ["Head"], ["Head"]), RewriteJob(), lambda *a: None)
    assert verdict.applicability == "unsafe"
    assert "outputs differ on x [2, 8]" in verdict.reason and "max |Δ|" in verdict.reason


CONV_BN = """
import torch
from torch import nn


# fxls: x = (B=2, 3, 8, 8)
class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))
"""


def test_conv_bn_fusion_pasted_into_forward_is_caught() -> None:
    """Folding a fresh BatchNorm into the convolution (what a fusion pass does) looks right
    in eval mode with default statistics; the randomized statistics show the difference."""
    original = _original("conv_bn.py", CONV_BN)
    edit = _replace(original.source, "self.bn(self.conv(x))", "self.conv(x)")
    verdict = verify(
        original, Change([edit], ["ConvBN"], ["ConvBN"]), RewriteJob(), lambda *a: None
    )
    assert verdict.applicability == "unsafe", verdict
    assert "outputs differ" in verdict.reason


def test_randomize_moves_batchnorm_away_from_the_identity() -> None:
    bn = torch.nn.BatchNorm1d(4)
    with torch.no_grad():
        randomize(bn, 0)
    assert not torch.allclose(bn.running_mean, torch.zeros(4))
    assert not torch.allclose(bn.running_var, torch.ones(4))
    assert not torch.allclose(bn.weight, torch.ones(4))


def test_edits_that_do_not_parse_or_build_are_unavailable() -> None:
    original = _original("dead_code_after.py")
    broken = _replace(original.source, "kept = h * 2", "kept = h *")
    verdict = verify(original, Change([broken], ["Head"], ["Head"]), RewriteJob(), lambda *a: None)
    assert verdict.applicability == "unavailable" and "does not parse" in verdict.reason
    no_build = _replace(original.source, "nn.Linear(8, 8)", "nn.Linear(8, 8, nope=1)")
    verdict = verify(
        original, Change([no_build], ["Head"], ["Head"]), RewriteJob(), lambda *a: None
    )
    assert verdict.applicability == "unavailable" and "build" in verdict.reason


def test_too_large_to_verify_is_unsafe() -> None:
    job = _job("dead_code_before.py")
    diag = _diagnostic(job, "Head", "FX302")
    outcome = _one(job, _fix("dead-code", "Head", diag.span, "FX302"), max_params=10)
    assert outcome.applicability == "unsafe"
    assert outcome.reason.startswith("unsafe: too large to verify")
    assert outcome.edits  # offered to users who ask for unsafe fixes


def test_combination_leaves_out_unsafe_fixes_unless_asked() -> None:
    job = _job("dead_code_before.py")
    first = _diagnostic(job, "Head", "FX302", 0)
    second = _diagnostic(job, "Head", "FX302", 1)
    fixes = [
        _fix("dead-code", "Head", first.span, "FX302"),
        _fix("dead-code", "Head", second.span, "FX302"),
    ]
    fixes[1].id = "second"
    result = _rewrite(job, *fixes, combine=True, max_params=10)
    assert result.rewrite is not None and result.rewrite.combined is None
    result = _rewrite(job, *fixes, combine=True, max_params=10, unsafe=True)
    assert result.rewrite is not None
    combined = result.rewrite.combined
    assert combined is not None and combined.applicability == "unsafe"
    assert apply_edits(job.source, combined.edits) == (FIXTURES / "dead_code_after.py").read_text()


def test_line_shift_through_insertions_and_deletions() -> None:
    shift = LineShift(
        [
            TextEdit(Span(3, 0, 3, 0), "# a\n# b\n"),
            TextEdit(Span(10, 0, 11, 0), ""),
        ]
    )
    assert [shift.line(n) for n in (1, 3, 4, 10, 11, 12)] == [1, 5, 6, 12, 12, 13]


def test_a_file_that_does_not_run_makes_every_fix_unavailable() -> None:
    job = _job("boom.py", "raise RuntimeError('boom')\n")
    outcome = _one(job, _fix("dead-code", "X", Span(1, 0, 1, 1)))
    assert outcome.applicability == "unavailable" and "does not run" in outcome.reason


@pytest.mark.asyncio(loop_scope="module")
async def test_rewrite_job_through_the_zygote(worker: Any) -> None:
    job = _job("dead_code_before.py")
    diag = _diagnostic(job, "Head", "FX302")
    rewrite = RewriteJob(fixes=[_fix("dead-code", "Head", diag.span, "FX302")])
    result = await worker.run(job, rewrite=rewrite)
    assert result.kind == "ok", result.message
    assert result.payload is not None and result.payload.rewrite is not None
    (outcome,) = result.payload.rewrite.outcomes
    assert outcome.applicability == "safe", outcome.reason
    assert "seccomp" in result.isolation or result.isolation


# ---------------------------------------------------------------------------------------
# Attention -> scaled_dot_product_attention
# ---------------------------------------------------------------------------------------


def test_attention_rewrites_verify_with_the_right_mask_and_scale() -> None:
    """nanoGPT's causal mask becomes ``is_causal=True``; a banded mask cannot, so it becomes
    ``attn_mask=``; a scale that is not the default stays; dropout keeps its probability in
    training. Each verified in eval mode on real tensors."""
    from fxls.engine import fixes
    from fxls.engine.analyze import FileAnalysis

    job = _job("attention_before.py")
    _, result = capture_document(job, lambda *a: None)
    analysis = FileAnalysis(
        path=job.path, version=1, modules=result.modules, classes=parse(job.source).classes
    )
    requests = []
    for mod in result.modules:
        for covering, softmax in fixes.attention_spans(mod):
            (cand,) = [
                c
                for c in fixes.refactors_at(analysis, job.source, softmax.line, softmax.col)
                if c.kind == "attention"
            ]
            assert cand.span == covering
            requests.append(cand.request())
    assert [r.cls for r in requests] == ["Causal", "Banded", "ViTStyle"]
    outcome = _rewrite(job, *requests, combine=True)
    assert outcome.rewrite is not None and outcome.rewrite.combined is not None
    assert [o.applicability for o in outcome.rewrite.outcomes] == ["safe"] * 3
    after = apply_edits(job.source, outcome.rewrite.combined.edits)
    assert after == (FIXTURES / "attention_after.py").read_text()


def test_attention_whose_weights_are_used_is_not_rewritten() -> None:
    job = _job("attention_before.py")
    text = job.source
    line = text.split("\n").index("        att = F.softmax(att, dim=-1)", 80) + 1
    outcome = _one(job, _fix("attention", "ReturnsWeights", Span(line - 1, 0, line + 1, 20)))
    assert outcome.applicability == "unavailable"
    assert "no attention pattern" in outcome.reason


def test_wrap_a_helper_for_plain_torch_fx() -> None:
    job = _job("wrap_before.py")
    diag = _diagnostic(job, "Normalized", "FX101")
    assert diag.data["wrap"] == "normalize"
    outcome = _one(job, _fix("wrap", "Normalized", diag.span, "FX101", wrap="normalize"))
    assert outcome.applicability == "safe", outcome.reason
    assert "plain `torch.fx.symbolic_trace` of `Normalized` succeeds" in outcome.checks
    assert apply_edits(job.source, outcome.edits) == (FIXTURES / "wrap_after.py").read_text()
    # already wrapped: nothing to do
    job = _job("wrap_after.py")
    outcome = _one(job, _fix("wrap", "Normalized", diag.span, "FX101", wrap="normalize"))
    assert outcome.applicability == "unavailable" and "already wrapped" in outcome.reason


def test_unpacked_sizes_become_one_argument_for_any_rank() -> None:
    """``*x.shape[:-1]`` in ``view`` / ``new_zeros`` -> ``x.shape[:-1] + (...)``: plain FX traces
    past it and the module computes the same; ``*`` of a list is not rewritten."""
    job = _job("sizes_before.py")
    after = (FIXTURES / "sizes_after.py").read_text()
    fixes = [
        _fix("sizes", "Heads", _diagnostic(job, "Heads", "FX103").span, "FX103"),
        _fix("sizes", "Padded", _diagnostic(job, "Padded", "FX103").span, "FX103"),
    ]
    for i, fix in enumerate(fixes):
        fix.id = f"fix{i}"
    result = _rewrite(job, *fixes, combine=True)
    assert result.rewrite is not None
    for outcome in result.rewrite.outcomes:
        assert outcome.applicability == "safe", (outcome.id, outcome.reason)
        assert any("symbolic_trace" in c or "traces past" in c for c in outcome.checks)
    combined = result.rewrite.combined
    assert combined is not None and combined.applicability == "safe"
    assert apply_edits(job.source, combined.edits) == after
    listed = _one(job, _fix("sizes", "Listed", _diagnostic(job, "Listed", "FX103").span, "FX103"))
    assert listed.applicability == "unavailable" and "unpacked" in listed.reason


def test_a_pass_whose_own_lint_fails_is_blamed_at_its_edit() -> None:
    """``fc1.args = (fc2,)`` then ``gm.graph.lint()`` in the pass: FX353 at the assignment,
    not FX356 at the ``lint()`` line. The pass failed, so it is not offered as a refactor."""
    from fxls.worker.capture.pipeline import run_capture

    job = _job("pass_lint.py")
    result = run_capture(job, lambda *a: None)
    (net,) = result.modules
    lines = job.source.split("\n")
    blamed = [(d.code, d.span.line) for d in net.diagnostics if d.code.startswith("FX35")]
    assert blamed == [("FX353", lines.index("    fc1.args = (fc2,)") + 1)]
    (run,) = net.passes
    assert run.status == "failed" and "used before it has been defined" in run.message


# ---------------------------------------------------------------------------------------
# False refusals
# ---------------------------------------------------------------------------------------


def test_len_of_an_input_the_fake_run_fixed_verifies() -> None:
    """torch.fx fails on ``len(x)``, so the original is captured by running ``forward`` on
    fake tensors, where ``len`` fixes the batch size (the shapes get the name back by a run at
    another size); the edit traces with ``[B, 8]``: the same shapes, the fix is safe."""
    job = _job("len_shapes_before.py")
    diag = _diagnostic(job, "Mean", "FX102")
    _, result = capture_document(job, lambda *a: None)
    (mod,) = result.modules
    assert strategy_label(mod.strategy) == "fake-run" and mod.outputs[0].shape == ["B", 8]
    outcome = _one(job, _fix("length", "Mean", diag.span, "FX102"))
    assert outcome.applicability == "safe", outcome.reason
    assert "captures as far with the same shapes: `Mean` traced (fx)" in outcome.checks
    assert apply_edits(job.source, outcome.edits) == (FIXTURES / "len_shapes_after.py").read_text()


def test_len_of_a_shape_becomes_the_rank() -> None:
    """``len(h.shape)`` is the rank of ``h``: the fix writes ``h.dim()`` and verifies where
    plain torch.fx then traces; in a branch it does not, and the refusal says why."""
    job = _job("len_rank_before.py")
    diag = _diagnostic(job, "Softmaxed", "FX102")
    assert diag.fix is not None
    assert "Use `h.dim()` instead of `len(h.shape)`: the number of dimensions" in diag.fix
    outcome = _one(job, _fix("length", "Softmaxed", diag.span, "FX102"))
    assert outcome.applicability == "safe", outcome.reason
    assert apply_edits(job.source, outcome.edits) == (FIXTURES / "len_rank_after.py").read_text()
    branch = _diagnostic(job, "Pooled", "FX102")
    refused = _one(job, _fix("length", "Pooled", branch.span, "FX102"))
    assert refused.applicability == "unavailable"
    assert "torch.fx still fails at the edit" in refused.reason
    assert "control flow" in refused.reason


def test_an_edit_that_fixes_a_size_the_original_kept_changes_the_shapes() -> None:
    """The reverse of the above is a change, said with both shapes."""
    original = _original("len_shapes_after.py")
    edit = _replace(original.source, "return self.fc(x) / n", "return self.fc(x)[:2] / n")
    verdict = verify(original, Change([edit], ["Mean"], ["Mean"]), RewriteJob(), lambda *a: None)
    assert verdict.applicability == "unavailable"
    assert "the output shapes of `Mean` change: [B, 8] before, [2, 8] after" in verdict.reason


def test_size_values_at_the_example_sizes() -> None:
    from fxls.worker.rewrite.verify import size_value

    sizes = {"B": 2, "T": 8}
    assert [size_value(t, sizes) for t in ("B", "T - 1", "2*B", "(T//2)", "Max(1, T)")] == [
        2, 7, 4, 4, 8,
    ]  # fmt: skip
    assert [size_value(t, sizes) for t in ("C", "B + ", "x.y", "B**99999", "T/2")] == [None] * 5


def _attention_requests(job: CaptureJob) -> list[FixRequest]:
    """The attention refactor at each softmax, as the server lists it."""
    from fxls.engine import fixes
    from fxls.engine.analyze import FileAnalysis

    _, result = capture_document(job, lambda *a: None)
    analysis = FileAnalysis(
        path=job.path, version=1, modules=result.modules, classes=parse(job.source).classes
    )
    requests: dict[str, FixRequest] = {}
    for mod in result.modules:
        for _, softmax in fixes.attention_spans(mod):
            for cand in fixes.refactors_at(analysis, job.source, softmax.line, softmax.col):
                if cand.kind == "attention":
                    requests.setdefault(cand.id, cand.request())
    return list(requests.values())


def test_causal_attention_built_from_a_filled_config_is_rebuilt_by_its_recipe() -> None:
    """minGPT: the model is built from ``GPT.get_default_config()`` with sizes fxls fills in,
    which no expression writes down, and the attention block is the one the model builds. The
    verification builds both again the same way, in eval and in training mode (dropout)."""
    job = _job("causal_attention_before.py")
    (request,) = _attention_requests(job)
    assert request.cls == "CausalSelfAttention"
    outcome = _one(job, request)
    assert outcome.applicability == "safe", outcome.reason
    after = (FIXTURES / "causal_attention_after.py").read_text()
    assert apply_edits(job.source, outcome.edits) == after
    assert "dropout_p=self.attn_dropout.p if self.training else 0.0" in after
    assert any(
        c.startswith("`CausalSelfAttention` computes the same (eval") for c in outcome.checks
    )
    assert any("in training mode (dropout on, the same seed)" in c for c in outcome.checks)


def test_attention_in_a_model_too_large_to_run_is_verified_alone() -> None:
    """The model is over ``max_params``, the attention block is not: the block alone is built
    on the CPU inside the model built on the meta device. Over the limit too: unsafe."""
    job = _job("causal_attention_before.py")
    (request,) = _attention_requests(job)
    outcome = _one(job, request, max_params=50_000)
    assert outcome.applicability == "safe", outcome.reason
    assert apply_edits(job.source, outcome.edits) == (
        (FIXTURES / "causal_attention_after.py").read_text()
    )
    assert any(
        "`CausalSelfAttention` alone on the CPU: `GPT`, which builds it, has 133,888 parameters"
        in c
        for c in outcome.checks
    ), outcome.checks
    outcome = _one(job, request, max_params=10_000)
    assert outcome.applicability == "unsafe"
    assert outcome.reason.startswith("unsafe: too large to verify (built inside `GPT`)")


def test_head_attention_and_functional_dropout() -> None:
    """Karpathy's ``Head``: ``k.shape[-1] ** -0.5`` is SDPA's default scale, and ``v =
    self.value(x)`` between the softmax and the product is kept above the new call.
    ``F.dropout(att, p=self.p, training=self.training)`` keeps its own condition."""
    job = _job("head_attention_before.py")
    requests = _attention_requests(job)
    assert [r.cls for r in requests] == ["Head", "FunctionalDropout"]
    for i, request in enumerate(requests):
        request.id = f"attention{i}"
    result = _rewrite(job, *requests, combine=True)
    assert result.rewrite is not None and result.rewrite.combined is not None
    for outcome in result.rewrite.outcomes:
        assert outcome.applicability == "safe", (outcome.id, outcome.reason)
        assert any("in training mode" in c for c in outcome.checks), outcome.checks
    after = apply_edits(job.source, result.rewrite.combined.edits)
    assert after == (FIXTURES / "head_attention_after.py").read_text()


def test_training_mode_catches_a_dropout_the_edit_drops() -> None:
    """Without ``dropout_p`` the edit computes the same in eval mode only."""
    original = _original("head_attention_before.py")
    source = original.source
    start = source.index("        wei = q @ k")
    end = source.index("        v = self.value(x)")
    lines = source[:start].count("\n") + 1, source[:end].count("\n") + 1
    edits = [
        TextEdit(Span(lines[0], 0, lines[1], 0), ""),
        _replace(source, "out = wei @ v", "out = F.scaled_dot_product_attention(q, k, v, is_causal=True)"),
    ]  # fmt: skip
    eval_only = verify(original, Change(edits, ["Head"], ["Head"]), RewriteJob(), lambda *a: None)
    assert eval_only.applicability == "safe", eval_only.reason
    both = Change(edits, ["Head"], ["Head"], train=["Head"])
    verdict = verify(original, both, RewriteJob(), lambda *a: None)
    assert verdict.applicability == "unsafe"
    assert "outputs differ in training mode (dropout on, same seed)" in verdict.reason


def test_remove_print_deletes_debug_calls_found_by_the_compile_check() -> None:
    from fxls.protocol.model import CompileJob
    from fxls.worker.compile.run import run_compile

    job = _job("remove_print_before.py")
    checked = run_compile(job, CompileJob(), lambda *a: None)
    (noisy,) = checked.modules
    found = [d for d in noisy.diagnostics if d.code == "FX601"]
    assert [d.span.line for d in found] == [10, 22]  # the helper's print, the logger call
    fixes = [_fix("remove-print", "Noisy", d.span, "FX601") for d in found]
    lines = job.source.splitlines()
    inner = next(i for i, line in enumerate(lines, 1) if "print(x.sum()" in line)
    fixes.append(_fix("remove-print", "Noisy", Span(inner, 12, inner, 33), "FX601"))
    for fix in fixes:
        fix.id = f"{fix.id}:{fix.span.line}"
    result = _rewrite(job, *fixes, combine=True)
    assert result.rewrite is not None
    outcomes = result.rewrite.outcomes
    assert [o.applicability for o in outcomes] == ["safe"] * 3, [o.reason for o in outcomes]
    assert outcomes[0].title == 'Remove the debug call `print("shape", x.shape)`'
    combined = result.rewrite.combined
    assert combined is not None and combined.applicability == "safe"
    after = (FIXTURES / "remove_print_after.py").read_text()
    assert apply_edits(job.source, combined.edits) == after


def test_remove_print_refuses_what_is_not_a_debug_call() -> None:
    job = _job("remove_print_before.py")
    line = job.source.splitlines().index("        return torch.relu(x)") + 1
    outcome = _one(job, _fix("remove-print", "Noisy", Span(line, 8, line, 28), "FX601"))
    assert outcome.applicability == "unavailable"
    assert "not a call statement" in (outcome.reason or "")
