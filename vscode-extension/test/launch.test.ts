import assert from "node:assert/strict";
import { test } from "node:test";
import {
  bundledLibsDir,
  chooseFxls,
  compareVersions,
  safePythonPath,
  SERVER_MODULE_ARGS,
  serverLaunch,
} from "../src/common/launch";

test("the server starts in the extension's folder with PYTHONSAFEPATH", () => {
  const launch = serverLaunch("/usr/bin/python3", SERVER_MODULE_ARGS, "/ext", { PATH: "/bin", GONE: undefined });
  assert.deepEqual(launch.args, ["-m", "fxls", "serve"]);
  assert.equal(launch.cwd, "/ext");
  assert.equal(launch.env.PYTHONSAFEPATH, "1");
  assert.equal(launch.env.PATH, "/bin");
  assert.ok(!("GONE" in launch.env));
  assert.ok(!("PYTHONPATH" in launch.env));
});

test("the bundled libraries go first on PYTHONPATH, never an empty or relative entry", () => {
  const libs = bundledLibsDir("/ext");
  assert.equal(libs, "/ext/bundled/libs");
  const launch = serverLaunch("python3", SERVER_MODULE_ARGS, "/ext", { PYTHONPATH: "/a::.:rel/dir:/b:" }, libs);
  assert.equal(launch.env.PYTHONPATH, "/ext/bundled/libs:/a:/b");
  assert.equal(launch.cwd, "/ext");
});

test("an inherited PYTHONPATH of only unsafe entries is dropped", () => {
  const launch = serverLaunch("python3", SERVER_MODULE_ARGS, "/ext", { PYTHONPATH: ":.:" });
  assert.ok(!("PYTHONPATH" in launch.env));
  assert.equal(safePythonPath(undefined, undefined), undefined);
  assert.equal(safePythonPath("/x", "/x:/y"), "/x:/y");
});

test("versions compare numerically", () => {
  assert.equal(compareVersions("0.10.0", "0.9.1"), 1);
  assert.equal(compareVersions("2.13.0+cpu", "2.13.0"), 0);
  assert.equal(compareVersions("2.3.1", "2.4"), -1);
  assert.equal(compareVersions("0.1", "0.1.0"), 0);
});

test("an installed fxls runs when it is at least the extension's version", () => {
  assert.equal(chooseFxls("0.1.0", "0.1.0", true), "installed");
  assert.equal(chooseFxls("0.2.0", "0.1.0", true), "installed");
  assert.equal(chooseFxls("0.0.9", "0.1.0", true), "bundled");
  assert.equal(chooseFxls(null, "0.1.0", true), "bundled");
  // a development build without bundled/libs: the interpreter's, whatever it is
  assert.equal(chooseFxls(null, "0.1.0", false), "installed");
});
