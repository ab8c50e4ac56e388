/**
 * How the server process is started: the working directory and environment that keep the
 * workspace off Python's module search path.
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
 * No `vscode` import here: tests run this module under plain Node.
 */

export interface Launch {
  command: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
}

/** The process to spawn for `command args...`, started in `neutralDir`. */
export function serverLaunch(
  command: string,
  args: string[],
  neutralDir: string,
  baseEnv: Record<string, string | undefined>,
): Launch {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(baseEnv)) {
    if (value !== undefined) {
      env[key] = value;
    }
  }
  env.PYTHONUNBUFFERED = "1";
  env.PYTHONSAFEPATH = "1";
  return { command, args: [...args], cwd: neutralDir, env };
}

/** The default server arguments after the interpreter. */
export const SERVER_MODULE_ARGS = ["-m", "fxls", "serve"];
