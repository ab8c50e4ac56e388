import assert from "node:assert/strict";
import { test } from "node:test";
import { notificationText } from "../src/common/text";
import { asTraceAnswer, severityOf, traceLog, traceMessage } from "../src/common/trace-core";

const traced = {
  kind: "traced",
  message: "SmallCNN: traced (fx) · 7 nodes · 2.4 k params · [B, 3, 32, 32] → [B, 10]",
  className: "SmallCNN",
  line: 6,
  version: 3,
  status: "traced",
  strategy: "fx",
  summary: "SmallCNN: traced (fx) · 7 nodes · 2.4 k params · [B, 3, 32, 32] → [B, 10]",
  details: ["SmallCNN · nn.Module · traced (fx)", "parameters  2.4 k (2,442)"],
  assumed: ["dim=64", "input x [B, 64] float32"],
  pin: "# fxls: init(dim=64)",
  diagnostics: [{ code: "FX408", severity: "information", message: "built with values fxls chose", line: 6 }],
  graph: true,
};

test("a traced class: its summary in the notification, details in the log", () => {
  assert.equal(traceMessage(traced), `fxls: ${traced.summary}`);
  assert.equal(severityOf(traced), "info");
  const log = traceLog(traced);
  assert.equal(log[0], "Trace of SmallCNN (document version 3):");
  assert.ok(log.includes("  parameters  2.4 k (2,442)"));
  assert.ok(log.includes("  assumed: dim=64, input x [B, 64] float32"));
  assert.ok(log.includes("  pin them with: # fxls: init(dim=64)"));
  assert.ok(log.includes("  line 7: information FX408 built with values fxls chose"));
});

test("errors make it a warning and are named", () => {
  const broken = {
    ...traced,
    kind: "partial",
    summary: "Gate: partial (fx) · 3 nodes",
    diagnostics: [{ code: "FX201", severity: "error", message: "shape error", line: null }],
  };
  assert.equal(severityOf(broken), "warning");
  assert.equal(traceMessage(broken), "fxls: Gate: partial (fx) · 3 nodes · FX201 shape error");
  assert.ok(traceLog(broken).includes("  edited line: error FX201 shape error"));
});

test("no class, untrusted: the server's sentence", () => {
  const none = { kind: "noClass", message: "fxls: the cursor is not in an nn.Module class." };
  assert.equal(traceMessage(none), none.message);
  assert.equal(severityOf(none), "info");
  assert.equal(severityOf({ kind: "untrusted", message: "not trusted" }), "warning");
  assert.equal(asTraceAnswer(null), undefined);
  assert.equal(asTraceAnswer({ kind: 3, message: "" }), undefined);
  assert.deepEqual(asTraceAnswer(none), none);
});

test("text from user code never becomes a link in a notification", () => {
  const hostile = { ...traced, summary: "X: failed · [click](command:workbench.action.terminal.new) \u0007" };
  const text = traceMessage(hostile);
  assert.ok(!/\]\(/.test(text), text);
  assert.ok(!text.includes("\u0007"));
  assert.equal(notificationText("a".repeat(500)).length, 400);
  assert.equal(notificationText("[B, 3] → [B, 10]"), "[B, 3] → [B, 10]");
});
