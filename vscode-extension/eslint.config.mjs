// ESLint flat config: typed typescript-eslint rules for the sources and tests, the recommended
// JavaScript rules for the build scripts. Formatting is Prettier's (.prettierrc.json).
import js from "@eslint/js";
import { defineConfig, globalIgnores } from "eslint/config";
import globals from "globals";
import tseslint from "typescript-eslint";

export default defineConfig(
  globalIgnores(["dist/", "out/", "bundled/"]),
  js.configs.recommended,
  {
    files: ["**/*.ts"],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: {
        // src/ is tsconfig.json's project, test/ is test/tsconfig.json's
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      // the tsconfig convention (noUnusedParameters): a parameter named `_x` is unused on purpose
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
      // node:test runs every top-level test() it is handed; their promises need no handling
      "@typescript-eslint/no-floating-promises": [
        "error",
        {
          allowForKnownSafeCalls: [
            { from: "package", package: "node:test", name: ["test", "describe", "suite", "it"] },
          ],
        },
      ],
    },
  },
  {
    files: ["**/*.mjs"],
    languageOptions: { globals: globals.node },
  },
);
