/**
 * How the server process is started: the working directory and environment that keep the
 * workspace off Python's module search path, and which fxls runs (the interpreter's own or the
 * copy bundled in the extension).
 *
 * `python -m fxls serve` puts its working directory first on `sys.path`. With the workspace as
 * working directory, a repository holding `fxls/__init__.py`, `logging.py`, `typing.py` or
 * `json.py` would run inside the server, outside the sandbox, before any trust check. So the
 * server starts in a directory the extension owns (its own install folder), with
 * `PYTHONSAFEPATH=1` (Python 3.11+: neither the working directory nor a script's directory is
 * added to `sys.path`); on Python 3.10 `fxls/__main__.py` also removes them before it imports
 * anything else. The server learns the workspace from the LSP `initialize` request, not from
 * its working directory.
 *
 * The .vsix carries fxls and its pure-Python dependencies in `bundled/libs`. When it runs, that
 * folder (an absolute path inside the extension) is put first on `PYTHONPATH`; empty and
 * relative entries of an inherited `PYTHONPATH` are dropped, since Python reads an empty entry
 * as the working directory.
 *
 * No `vscode` import here: tests run this module under plain Node.
 */
import * as path from "path";

export interface Launch {
  command: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
}

/** Where the fxls package that runs comes from. */
export type FxlsSource = "installed" | "bundled";

/** The bundled libraries folder inside the extension's folder. */
export function bundledLibsDir(extensionDir: string): string {
  return path.join(extensionDir, "bundled", "libs");
}

/**
 * `PYTHONPATH` with `first` in front of `inherited`'s entries; empty, `.` and relative entries
 * are dropped (Python resolves them against the working directory). Undefined when nothing
 * is left.
 */
export function safePythonPath(
  first: string | undefined,
  inherited: string | undefined,
  delimiter: string = path.delimiter,
): string | undefined {
  const entries: string[] = [];
  for (const entry of [first ?? "", ...(inherited ?? "").split(delimiter)]) {
    if (entry && path.isAbsolute(entry) && !entries.includes(entry)) {
      entries.push(entry);
    }
  }
  return entries.length > 0 ? entries.join(delimiter) : undefined;
}

/**
 * The process to spawn for `command args...`, started in `neutralDir`. With `bundledLibs`, that
 * folder goes first on `PYTHONPATH` (the .vsix's own fxls and its dependencies).
 */
export function serverLaunch(
  command: string,
  args: string[],
  neutralDir: string,
  baseEnv: Record<string, string | undefined>,
  bundledLibs?: string,
): Launch {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(baseEnv)) {
    if (value !== undefined) {
      env[key] = value;
    }
  }
  env.PYTHONUNBUFFERED = "1";
  env.PYTHONSAFEPATH = "1";
  const pythonPath = safePythonPath(bundledLibs, env.PYTHONPATH);
  if (pythonPath === undefined) {
    delete env.PYTHONPATH;
  } else {
    env.PYTHONPATH = pythonPath;
  }
  return { command, args: [...args], cwd: neutralDir, env };
}

/** The default server arguments after the interpreter. */
export const SERVER_MODULE_ARGS = ["-m", "fxls", "serve"];

/** -1, 0 or 1 comparing dotted versions numerically ("0.10.0" > "0.9.1"; "2.13.0+cpu" = "2.13.0"). */
export function compareVersions(a: string, b: string): number {
  const parts = (v: string) =>
    v
      .split(/[+-]/, 1)[0]
      .split(".")
      .map((p) => parseInt(p, 10) || 0);
  const x = parts(a);
  const y = parts(b);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) {
      return d < 0 ? -1 : 1;
    }
  }
  return 0;
}

/**
 * Which fxls runs: the interpreter's own when it is installed and at least the extension's
 * version, else the bundled copy (when the .vsix has one; a development checkout may not).
 */
export function chooseFxls(
  installedVersion: string | null | undefined,
  extensionVersion: string,
  hasBundled: boolean,
): FxlsSource {
  if (installedVersion && compareVersions(installedVersion, extensionVersion) >= 0) {
    return "installed";
  }
  return hasBundled ? "bundled" : "installed";
}
