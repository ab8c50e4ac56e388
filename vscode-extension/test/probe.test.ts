import assert from "node:assert/strict";
import { test } from "node:test";
import { classifyProbe, ProbeRun, shellQuote } from "../src/common/probe";

const ok = (info: object): ProbeRun => ({ exitCode: 0, stdout: JSON.stringify(info) + "\n", stderr: "" });
const base = { python: "3.11.7", executable: "/env/bin/python", torch: "2.13.0+cpu", fxls: null };

test("a missing interpreter says so and offers the setting and the log", () => {
  const c = classifyProbe(
    { spawnError: "ENOENT", exitCode: null, stdout: "", stderr: "" },
    "/no/python",
    "the fxls.python setting",
  );
  assert.equal(c.ok, false);
  assert.equal(c.problem?.kind, "no-python");
  assert.match(c.problem.message, /"\/no\/python" \(the fxls.python setting\) was not found/);
  assert.deepEqual(c.problem?.actions, ["openSetting", "showLog"]);
});

test("something that is not Python", () => {
  const c = classifyProbe({ exitCode: 2, stdout: "", stderr: "usage: foo\n" }, "/bin/foo", "the fxls.python setting");
  assert.equal(c.problem?.kind, "not-python");
  assert.match(c.problem.message, /exit 2: usage: foo/);
});

test("Python without torch: the exact pip command for that interpreter", () => {
  const c = classifyProbe(ok({ ...base, torch: null }), "python3", "python3 from PATH");
  assert.equal(c.ok, false);
  assert.equal(c.problem?.kind, "no-torch");
  assert.equal(c.problem?.command, "/env/bin/python -m pip install torch");
  assert.match(c.problem.message, /Install it with: \/env\/bin\/python -m pip install torch/);
  assert.deepEqual(c.problem?.actions, ["copyCommand", "openSetting", "showLog"]);
});

test("torch too old is a warning with the upgrade command; the server still starts", () => {
  const c = classifyProbe(ok({ ...base, torch: "2.1.2" }), "python3", "python3 from PATH");
  assert.equal(c.ok, true);
  assert.equal(c.problem?.kind, "torch-too-old");
  assert.equal(c.problem?.severity, "warning");
  assert.equal(c.problem?.command, "/env/bin/python -m pip install --upgrade 'torch>=2.4'");
});

test("Python too old", () => {
  const c = classifyProbe(ok({ ...base, python: "3.8.10" }), "python3", "python3 from PATH");
  assert.equal(c.problem?.kind, "python-too-old");
});

test("a good interpreter: its versions", () => {
  const c = classifyProbe(ok({ ...base, fxls: "0.1.0" }), "python3", "python3 from PATH");
  assert.equal(c.ok, true);
  assert.equal(c.problem, undefined);
  assert.equal(c.ok && c.info.fxls, "0.1.0");
});

test("paths with spaces are quoted for the shell", () => {
  assert.equal(shellQuote("/a b/python"), "'/a b/python'");
  assert.equal(shellQuote("/usr/bin/python3"), "/usr/bin/python3");
});
