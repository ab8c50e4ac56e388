// Restricted Mode: the extension starts no program the workspace chose until the workspace is
// trusted. The real activation (src/extension.ts) and server start (src/common/server.ts) run
// against the stand-in `vscode` module; every program is a real executable that appends its
// command line to a log, so the log lists every process the probe and the server start ran.
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { folderHolding, isInside, locateProgram } from "../src/common/trust";
import { activate } from "../src/extension";
import { started } from "./fakes/languageclient";
import { finish, posixOnly, program, Scene, scene, spawned, until, workspaceRuns } from "./fakes/scene";
import { fake, pythonExtension } from "./fakes/vscode";

/** Activates untrusted, then grants trust; returns after the restart that trust causes. */
async function untrustedThenTrusted(s: Scene, whileUntrusted: () => void): Promise<void> {
  await activate(s.context as never);
  whileUntrusted();
  const before = started.length;
  fake.trusted = true;
  fake.trustGranted.fire();
  await until("the server's restart after trust", () => started.length > before);
}

test("test_101_untrusted_workspace_folder_interpreter_waits_for_trust", posixOnly, async () => {
  const s = scene();
  try {
    fake.user = { python: "${workspaceFolder}/.venv/bin/python" };
    // a workspace's own value is never read, trusted or not
    fake.workspaceSettings = { python: path.join(s.userBin, "python3") };
    await untrustedThenTrusted(s, () => {
      assert.deepEqual(spawned(s), [], "nothing may run before trust");
      assert.equal(started.length, 0);
      assert.match(fake.status?.text ?? "", /shield/);
      assert.match(String(fake.status?.tooltip), /runs once the workspace is trusted/);
      assert.deepEqual(fake.messages, [], "restricted mode shows no error");
    });
    const runs = workspaceRuns(s);
    assert.ok(
      runs.some((line) => line.startsWith(`${s.workspacePython} -c `)),
      `probe after trust: ${runs.join(",")}`,
    );
    assert.ok(runs.includes(`${s.workspacePython} -m fxls serve`), `server after trust: ${runs.join(",")}`);
    assert.equal(started.at(-1)?.command, s.workspacePython);
    assert.equal((started.at(-1)?.initializationOptions as { trusted: boolean }).trusted, true);
  } finally {
    await finish(s);
  }
});

test("test_102_untrusted_workspace_python_extension_selection_not_consulted", posixOnly, async () => {
  const s = scene();
  try {
    const selection = pythonExtension(s.workspacePython);
    fake.pythonExtension = selection.extension;
    await untrustedThenTrusted(s, () => {
      assert.equal(selection.asked, 0, "the Python extension's workspace selection was asked for");
      assert.deepEqual(workspaceRuns(s), []);
      // the user's python3 from PATH runs instead, in restricted mode
      const userPython = path.join(s.userBin, "python3");
      assert.ok(spawned(s).includes(`${userPython} -m fxls serve`), spawned(s).join("\n"));
      assert.equal(started.length, 1);
      assert.equal((started[0].initializationOptions as { trusted: boolean }).trusted, false);
    });
    assert.ok(selection.asked > 0);
    assert.ok(workspaceRuns(s).includes(`${s.workspacePython} -m fxls serve`), spawned(s).join("\n"));
    assert.equal(started.at(-1)?.command, s.workspacePython);
  } finally {
    await finish(s);
  }
});

/** User-level configurations whose program, argument or module path still lands in the workspace. */
const LANDS_IN_WORKSPACE: Record<string, (s: Scene) => void> = {
  "PATH lookup of python3 finds the workspace's": (s) => {
    fs.symlinkSync(s.workspacePython, path.join(path.dirname(s.workspacePython), "python3"));
    process.env.PATH = `${path.dirname(s.workspacePython)}${path.delimiter}${process.env.PATH}`;
  },
  "fxls.python is a symlink into the workspace": (s) => {
    const link = path.join(s.root, "user", "python-link");
    fs.symlinkSync(s.workspacePython, link);
    fake.user = { python: link };
  },
  "fxls.server.command runs a script of the workspace": (s) => {
    const script = program(path.join(s.workspace, "tools", "serve"));
    fake.user = { "server.command": [path.join(s.userBin, "python3"), script] };
  },
  "fxls.server.command reaches the workspace through a linked folder": (s) => {
    const linkedBin = path.join(s.root, "user", "linked-bin");
    fs.symlinkSync(path.dirname(s.workspacePython), linkedBin);
    fake.user = { "server.command": [path.join(linkedBin, "python"), "serve"] };
  },
  "PYTHONPATH has a folder of the workspace": (s) => {
    process.env.PYTHONPATH = path.join(s.workspace, "src");
  },
};

test("test_103_untrusted_workspace_program_reached_by_path_link_or_argument_waits", posixOnly, async (t) => {
  for (const [name, configure] of Object.entries(LANDS_IN_WORKSPACE)) {
    await t.test(name, async () => {
      const s = scene();
      try {
        configure(s);
        await untrustedThenTrusted(s, () => {
          assert.deepEqual(spawned(s), [], "nothing may run before trust");
          assert.equal(started.length, 0);
          assert.match(String(fake.status?.tooltip), /runs once the workspace is trusted/);
        });
        assert.notDeepEqual(spawned(s), [], "the server starts after trust");
      } finally {
        await finish(s);
      }
    });
  }
});

test("a folder holds only what lies below it, by the written or the real path", posixOnly, async () => {
  const s = scene();
  try {
    const sibling = program(path.join(`${s.workspace}-other`, "python"));
    assert.equal(folderHolding(sibling, [s.workspace]), undefined);
    assert.equal(folderHolding(path.join(s.workspace, "..foo", "python"), [s.workspace]), s.workspace);
    assert.equal(isInside(path.join(s.workspace, "..", "x"), s.workspace), false);
    // a link from outside into the folder, and a folder reached through a link
    const link = path.join(s.root, "link-to-python");
    fs.symlinkSync(s.workspacePython, link);
    assert.equal(folderHolding(link, [s.workspace]), s.workspace);
    const linkedWorkspace = path.join(s.root, "linked-project");
    fs.symlinkSync(s.workspace, linkedWorkspace);
    assert.equal(folderHolding(s.workspacePython, [linkedWorkspace]), linkedWorkspace);
    // a bare name is found on PATH as spawn finds it; a name found nowhere locates nothing
    const bin = path.dirname(s.workspacePython);
    assert.equal(locateProgram("python", "/", `relative:${bin}`), s.workspacePython);
    assert.equal(locateProgram("no-such-program-fxls", "/", bin), undefined);
    assert.equal(locateProgram("./python", bin, undefined), s.workspacePython);
  } finally {
    await finish(s);
  }
});
