// Unit tests of src/common and of the activation: bundles test/*.test.ts with esbuild into
// out/test and runs them with Node's test runner. `vscode` and `vscode-languageclient/node`
// resolve to the stand-ins in test/fakes, so the extension's own code runs under plain Node.
// Arguments are passed to `node --test` (e.g. `npm test -- --test-name-pattern=test_101`).
import { execFileSync } from "node:child_process";
import { readdirSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const outdir = path.join(root, "out", "test");
const fakes = {
  vscode: path.join(root, "test", "fakes", "vscode.ts"),
  "vscode-languageclient/node": path.join(root, "test", "fakes", "languageclient.ts"),
};
const useFakes = {
  name: "fakes",
  setup(build) {
    build.onResolve({ filter: /^vscode(-languageclient\/node)?$/ }, (args) => ({ path: fakes[args.path] }));
  },
};
rmSync(outdir, { recursive: true, force: true });
const tests = readdirSync(path.join(root, "test")).filter((f) => f.endsWith(".test.ts"));
await esbuild.build({
  entryPoints: tests.map((f) => path.join(root, "test", f)),
  outdir,
  bundle: true,
  plugins: [useFakes],
  format: "cjs",
  platform: "node",
  target: "node18",
  logLevel: "warning",
});
const files = tests.map((f) => path.join(outdir, f.replace(/\.ts$/, ".js")));
execFileSync(process.execPath, ["--test", ...process.argv.slice(2), ...files], { stdio: "inherit" });
