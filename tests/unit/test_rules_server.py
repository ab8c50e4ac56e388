"""User rules on the server side: where the rules file is, how it is read (never executed),
and the quick fix an FX360 offers."""

from __future__ import annotations

import sys
from pathlib import Path

from fxls.analysis import parse
from fxls.engine import analyze as engine
from fxls.engine.analyze import EngineOptions, FileAnalysis, capture_job, is_rules_file, read_rules
from fxls.engine.fixes import candidates, rule_name
from fxls.protocol.files import Refused
from fxls.protocol.fixkinds import FIX_ALL_KINDS
from fxls.protocol.model import Diagnostic, ModuleResult, RulesFile, Span

MODEL = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))
"""


def test_the_rules_file_stays_inside_the_workspace(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert engine.rules_path(root, "fxls_rules.py") == str(tmp_path / "fxls_rules.py")
    assert engine.rules_path(root, "tools/rules.py") == str(tmp_path / "tools" / "rules.py")
    assert engine.rules_path(root, "../elsewhere.py") is None
    assert engine.rules_path(root, "/etc/passwd") is None
    assert engine.rules_path(root, "") is None
    assert engine.rules_path(None, "fxls_rules.py") is None


def test_the_rules_file_is_read_as_text_never_run(tmp_path: Path) -> None:
    path = tmp_path / "fxls_rules.py"
    assert read_rules(str(path)) is None  # missing
    path.write_text("import sys\nsys.modules['fxls_rules_ran'] = True\n")
    rules = read_rules(str(path))
    assert rules == RulesFile(str(path), path.read_text())
    assert "fxls_rules_ran" not in sys.modules
    assert read_rules(str(path), "editor text") == RulesFile(str(path), "editor text")
    path.write_text("x" * (engine.RULES_MAX_BYTES + 1))
    too_large = read_rules(str(path))
    assert isinstance(too_large, Refused) and too_large.kind == "too_large"


def test_every_capture_job_carries_the_rules(tmp_path: Path) -> None:
    rules = RulesFile(str(tmp_path / "fxls_rules.py"), "def pattern_a(x): return x\n")
    options = EngineOptions(rules=rules)
    model = str(tmp_path / "model.py")
    job = capture_job(model, MODEL, [c.request() for c in parse(MODEL).classes], options)
    assert job.rules == rules
    assert not is_rules_file(model, options)
    # the rules file's own job names it by the job's path (the worker then reports its problems)
    relative = "fxls_rules.py"
    assert is_rules_file(str(tmp_path / relative), options)
    own = capture_job(str(tmp_path / relative), rules.source, [], options)
    assert own.rules is not None and own.rules.path == own.path


def _analysis(rule: str) -> FileAnalysis:
    parsed = parse(MODEL)
    line = MODEL.split("\n").index("        return torch.sigmoid(self.fc(x))") + 1
    span = Span(line, 15, line, 40)
    diag = Diagnostic(
        "FX360", "information", f"rule `{rule}` matches here", span, data={"rule": rule}
    )
    mod = ModuleResult(name="Net", line=5, status="traced", diagnostics=[diag])
    return FileAnalysis(path="model.py", version=1, modules=[mod], classes=parsed.classes)


def test_a_match_offers_the_rule_as_a_quick_fix_that_fix_all_applies() -> None:
    (cand,) = candidates(_analysis("hard_gate"), MODEL)
    assert cand.kind == "rule" and cand.cls == "Net" and cand.code == "FX360"
    assert cand.title == "Apply rule `hard_gate`"
    assert cand.params == {"rule": "hard_gate"}
    assert cand.fix_all and "rule" in FIX_ALL_KINDS
    assert cand.request().params == {"rule": "hard_gate"}


def test_rule_names_in_titles_are_plain_and_short() -> None:
    assert rule_name("gelu_tanh") == "gelu_tanh"
    assert rule_name("a`b\nc[x](y)") == "a?b?c?x??y?"
    assert len(rule_name("n" * 500)) == 60
    (cand,) = candidates(_analysis("odd`name](javascript:x)"), MODEL)
    assert "`" not in cand.title[len("Apply rule `") : -1]


def test_a_rules_text_too_slow_to_load_goes_only_to_its_own_file(tmp_path: Path) -> None:
    # after a job reports that the rules took too long to load (CaptureResult.rules_too_slow),
    # the session leaves that text out of other files' jobs (each would wait for it again),
    # keeps it for the rules file's own capture (its FX361), says so once, and sends the rules
    # again once their text changes
    from lsprotocol import types

    from fxls.lsp.session import Session

    rules_path = tmp_path / "fxls_rules.py"
    rules_path.write_text("while True:\n    pass\n")
    session = Session(None)  # type: ignore[arg-type]
    session.root = str(tmp_path)
    logged: list[str] = []
    session.log = lambda message, kind=types.MessageType.Info: logged.append(message)  # type: ignore[method-assign]
    model = str(tmp_path / "model.py")
    options = session.engine_options(model)
    assert options.rules is not None
    session._note_slow_rules(options)
    session._note_slow_rules(options)
    assert len(logged) == 1 and "fxls_rules.py" in logged[0] and "FX361" in logged[0]
    assert session.engine_options(model).rules is None
    assert session.engine_options().rules is None
    assert session.engine_options(str(rules_path)).rules is not None
    rules_path.write_text("def pattern_a(x):\n    return x\n")
    assert session.engine_options(model).rules is not None


async def test_fxls_check_stops_sending_rules_that_load_too_slowly(tmp_path: Path) -> None:
    # the first file's job reports the rules as too slow: the files after it go without them,
    # the rules file itself keeps them
    from fxls.cli.check.config import CodeFilter
    from fxls.cli.check.discovery import Target
    from fxls.cli.check.run import FileWork, run_worklist
    from fxls.protocol.model import CaptureJob, CaptureResult, Isolation, JobResult, Limits

    sent: list[tuple[str, bool]] = []

    class Worker:
        async def run(self, job: CaptureJob, limits: Limits, isolation: Isolation) -> JobResult:
            sent.append((Path(job.path).name, job.rules is not None))
            return JobResult(id=len(sent), kind="ok", payload=CaptureResult(rules_too_slow=True))

    rules = RulesFile(str(tmp_path / "fxls_rules.py"), "while True:\n    pass\n")
    names = ["a.py", "b.py", "fxls_rules.py", "c.py"]
    worklist = [FileWork(Target(str(tmp_path / n), True), MODEL, None) for n in names]
    options = EngineOptions(rules=rules)
    async for _ in run_worklist(Worker(), worklist, options, CodeFilter(), concurrency=1):
        pass
    assert sent == [("a.py", True), ("b.py", False), ("fxls_rules.py", True), ("c.py", False)]
