// Copies fxls and its pure-Python dependencies into bundled/libs (shipped in the .vsix and put
// on the server's PYTHONPATH when the interpreter has no fxls of at least this version).
//
// Usage: node scripts/bundle-python.mjs        (FXLS_BUNDLE_PYTHON picks the pip; default python3)
// 1. builds the fxls wheel from this repository (`pip wheel --no-deps ..`);
// 2. `pip install --target bundled/libs` of that wheel with its dependencies as pure-Python
//    wheels, plus tomli and exceptiongroup, which fxls and cattrs need on Python 3.10 only
//    (newer Pythons never import them). Only the package index is needed (PyPI or a mirror).
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const extension = path.dirname(here);
const repo = path.dirname(extension);
const libs = path.join(extension, "bundled", "libs");
const python = process.env.FXLS_BUNDLE_PYTHON || "python3";
const version = JSON.parse(readFileSync(path.join(extension, "package.json"), "utf8")).version;

const init = readFileSync(path.join(repo, "fxls", "__init__.py"), "utf8");
const fxlsVersion = /__version__\s*=\s*"([^"]+)"/.exec(init)?.[1];
if (fxlsVersion !== version) {
  console.error(`bundle-python: fxls is ${fxlsVersion} but the extension is ${version}; make them equal`);
  process.exit(1);
}

const run = (args) =>
  execFileSync(python, ["-m", "pip", ...args], {
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, PIP_DISABLE_PIP_VERSION_CHECK: "1", PIP_NO_INPUT: "1" },
  });

const wheels = mkdtempSync(path.join(tmpdir(), "fxls-wheel-"));
try {
  run(["wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, repo]);
  const wheel = readdirSync(wheels).find((f) => f.startsWith("fxls-") && f.endsWith(".whl"));
  if (!wheel) throw new Error("pip wheel made no fxls wheel");
  rmSync(libs, { recursive: true, force: true });
  // pip's options stay beside their values
  // prettier-ignore
  run([
    "install", "--quiet", "--no-compile", "--target", libs,
    "--only-binary=:all:", "--python-version", "3.10", "--implementation", "py",
    "--abi", "none", "--platform", "any",
    path.join(wheels, wheel),
    // needed on Python 3.10 only (pip resolves markers for the running Python, not --python-version)
    "tomli>=1.1", "exceptiongroup>=1.1.1",
  ]);
} finally {
  rmSync(wheels, { recursive: true, force: true });
}
// console scripts point at the build machine's interpreter; the server is run with -m
rmSync(path.join(libs, "bin"), { recursive: true, force: true });
for (const needed of ["fxls/__main__.py", "fxls/graph/vendor/dagre.min.js", "pygls", "lsprotocol", "cattrs", "attr"]) {
  if (!existsSync(path.join(libs, needed))) {
    console.error(`bundle-python: ${needed} is missing from ${libs}`);
    process.exit(1);
  }
}
const packages = readdirSync(libs)
  .filter((f) => f.endsWith(".dist-info"))
  .map((f) => f.replace(/\.dist-info$/, ""));
console.error(`bundle-python: ${libs}: ${packages.join(", ")}`);
