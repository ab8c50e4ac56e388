/**
 * A scene for tests that run the extension's activation against the stand-in `vscode` module:
 * a temporary workspace folder with its own interpreter, a folder of the user's first on PATH
 * with a `python3`, and a log that every program appends its command line to.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { deactivate } from "../../src/extension";
import { started } from "./languageclient";
import { fake, Uri } from "./vscode";

export const posixOnly = { skip: process.platform === "win32" ? "the fake interpreters are shell scripts" : false };

/** A program that logs its command line and, asked for the probe (`-c`), answers as a Python with torch. */
const INTERPRETER = `#!/bin/sh
printf '%s\\n' "$0 $*" >> "$FXLS_TEST_SPAWN_LOG"
if [ "$1" = "-c" ]; then
  printf '{"python": "3.11.7", "executable": "%s", "torch": "2.5.0", "fxls": "99.0.0"}\\n' "$0"
fi
`;

export interface Scene {
  root: string;
  workspace: string;
  /** The workspace's own interpreter, `<workspace>/.venv/bin/python`. */
  workspacePython: string;
  /** A folder of the user's, outside the workspace, first on PATH, with its own `python3`. */
  userBin: string;
  spawnLog: string;
  context: { subscriptions: { dispose(): unknown }[] };
}

/** Writes the executable `file` (by default a fake interpreter, see INTERPRETER). */
export function program(file: string, text = INTERPRETER): string {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text, { mode: 0o755 });
  return file;
}

const savedEnv = { PATH: process.env.PATH, PYTHONPATH: process.env.PYTHONPATH, LOG: process.env.FXLS_TEST_SPAWN_LOG };

export function scene(): Scene {
  const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "fxls-trust-")));
  const workspace = path.join(root, "project");
  const userBin = path.join(root, "user", "bin");
  const extensionDir = path.join(root, "extension");
  fs.mkdirSync(extensionDir, { recursive: true });
  program(path.join(userBin, "python3"));
  const spawnLog = path.join(root, "spawned.log");
  process.env.FXLS_TEST_SPAWN_LOG = spawnLog;
  process.env.PATH = `${userBin}${path.delimiter}${savedEnv.PATH ?? ""}`;
  delete process.env.PYTHONPATH;
  fake.reset();
  fake.folders = [workspace];
  started.length = 0;
  const context = {
    subscriptions: [] as { dispose(): unknown }[],
    extensionUri: Uri.file(extensionDir),
    extension: { packageJSON: { version: "0.1.0" } },
  };
  const workspacePython = program(path.join(workspace, ".venv", "bin", "python"));
  return { root, workspace, workspacePython, userBin, spawnLog, context };
}

export async function finish(s: Scene): Promise<void> {
  await deactivate();
  for (const d of s.context.subscriptions) {
    d.dispose();
  }
  process.env.PATH = savedEnv.PATH;
  process.env.FXLS_TEST_SPAWN_LOG = savedEnv.LOG;
  if (savedEnv.PYTHONPATH === undefined) {
    delete process.env.PYTHONPATH;
  } else {
    process.env.PYTHONPATH = savedEnv.PYTHONPATH;
  }
  fs.rmSync(s.root, { recursive: true, force: true });
}

/** The command lines the programs logged, in order. */
export function spawned(s: Scene): string[] {
  return fs.existsSync(s.spawnLog) ? fs.readFileSync(s.spawnLog, "utf8").trim().split("\n") : [];
}

/** The logged command lines that ran a program of the workspace or named a file in it. */
export function workspaceRuns(s: Scene): string[] {
  return spawned(s).filter((line) => line.includes(s.workspace));
}

export async function until(what: string, predicate: () => boolean, timeoutMs = 10000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) {
      assert.fail(`timed out waiting for ${what}; log: ${fake.log.join(" | ")}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
