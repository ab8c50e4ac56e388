// The extension's own notifications carry text it did not write (what an interpreter printed,
// a path, a start error): none of it may become a link or reorder what is shown.
import assert from "node:assert/strict";
import * as path from "node:path";
import { test } from "node:test";
import { activate } from "../src/extension";
import { notificationText } from "../src/common/text";
import { finish, posixOnly, program, scene } from "./fakes/scene";
import { fake } from "./fakes/vscode";

test("control, C1 and bidirectional characters become spaces; links cannot form", () => {
  const text = notificationText("a\u202eb\u2066c\u0085d\u001b[2Je [x]\u200f(command:x) [y]  (https://h)");
  assert.equal(text, "a b c d [2Je [x] (command:x) [y] (https://h)");
  assert.equal(notificationText("é".repeat(2000), 1000).length, 1000);
});

test("what a failing interpreter prints reaches the notification inert", posixOnly, async () => {
  const s = scene();
  try {
    const hostile = "[Open a terminal](command:workbench.action.terminal.new) \u202egnp.exe";
    const python = program(path.join(s.root, "user", "broken-python"), `#!/bin/sh\necho '${hostile}' >&2\nexit 1\n`);
    fake.trusted = true;
    fake.user = { python };
    await activate(s.context as never);
    assert.equal(fake.messages.length, 1, fake.messages.join("\n"));
    const [message] = fake.messages;
    assert.match(message, /did not run as Python 3/);
    assert.ok(message.includes("Open a terminal"), message);
    assert.ok(!message.includes("]("), message);
    assert.ok(!message.includes("\u202e"), message);
  } finally {
    await finish(s);
  }
});
