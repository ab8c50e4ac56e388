// Bundles src/extension.ts and vscode-languageclient into one CommonJS file, dist/extension.js.
// Usage: node scripts/build.mjs [--production] [--watch]
import * as esbuild from "esbuild";

const production = process.argv.includes("--production");
const watch = process.argv.includes("--watch");

const options = {
  entryPoints: ["src/extension.ts"],
  outfile: "dist/extension.js",
  bundle: true,
  external: ["vscode"],
  format: "cjs",
  platform: "node",
  target: "node18",
  minify: production,
  sourcemap: !production,
  logLevel: "warning",
};

if (watch) {
  const context = await esbuild.context(options);
  await context.watch();
} else {
  await esbuild.build(options);
}
