// Unit tests of the pure modules in src/common (no `vscode` import): bundles test/*.test.ts
// with esbuild into out/test and runs them with Node's test runner.
import { execFileSync } from "node:child_process";
import { readdirSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const outdir = path.join(root, "out", "test");
rmSync(outdir, { recursive: true, force: true });
const tests = readdirSync(path.join(root, "test")).filter((f) => f.endsWith(".test.ts"));
await esbuild.build({
  entryPoints: tests.map((f) => path.join(root, "test", f)),
  outdir,
  bundle: true,
  external: ["vscode"],
  format: "cjs",
  platform: "node",
  target: "node18",
  logLevel: "warning",
});
const files = tests.map((f) => path.join(outdir, f.replace(/\.ts$/, ".js")));
execFileSync(process.execPath, ["--test", ...files], { stdio: "inherit" });
