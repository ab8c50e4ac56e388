import assert from "node:assert/strict";
import { test } from "node:test";
import { classAt, className, classesIn, isRevealMessage, webviewHtml } from "../src/common/graph-core";

const lines = [
  "import torch",
  "class A(nn.Module):",
  "    def forward(self, x):",
  "        return x",
  "",
  "class B(A):",
  "    pass",
];

test("the class around the cursor", () => {
  assert.equal(className("class Net(nn.Module):"), "Net");
  assert.equal(className("    class Inner:"), "Inner");
  assert.equal(className("x = 1  # class Foo("), undefined);
  assert.equal(classAt(lines, 3), "A");
  assert.equal(classAt(lines, 6), "B");
  assert.equal(classAt(lines, 0), undefined);
  assert.deepEqual(classesIn(lines), [
    { name: "A", line: 1 },
    { name: "B", line: 5 },
  ]);
});

test("reveal messages are checked", () => {
  assert.ok(isRevealMessage({ type: "reveal", line: 3, col: 0 }));
  assert.ok(!isRevealMessage({ type: "reveal", line: 0, col: 0 }));
  assert.ok(!isRevealMessage({ type: "reveal", line: "3", col: 0 }));
  assert.ok(!isRevealMessage(null));
});

test("the webview page: a CSP, a nonce on every script, the bridge last", () => {
  const page =
    '<html><head><meta charset=utf-8></head><body><script type="application/json">{}</script><script>go()</script></body></html>';
  const out = webviewHtml(page, "N0nce", "vscode-resource:");
  assert.match(
    out,
    /<head>\n<meta http-equiv="Content-Security-Policy" content="default-src 'none';[^"]*script-src 'nonce-N0nce';">/,
  );
  assert.equal((out.match(/<script nonce="N0nce"/g) ?? []).length, 3);
  assert.equal((out.match(/<script(?! nonce="N0nce")[\s>]/g) ?? []).length, 0);
  assert.match(out, /acquireVsCodeApi[\s\S]*<\/script>\n<\/body><\/html>$/);
});
