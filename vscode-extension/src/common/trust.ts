/**
 * What the extension may start while the workspace is not trusted.
 *
 * In Restricted Mode an untrusted folder runs nothing of its own, and that includes the
 * programs the extension starts outside the sandbox (the probe, then the server). A start
 * belongs to the workspace, and waits until the workspace is trusted, when:
 *
 * - its configured path names the open folder (`${workspaceFolder}` in `fxls.python`): the
 *   folder then decides what runs, wherever the path lands (`${workspaceFolder}/../venv` too);
 * - the program lies in a workspace folder: as configured, as found on `PATH`, or after
 *   resolving symbolic links. The path as written counts as well as the real one: a
 *   virtualenv's `bin/python` links to a system binary, but the environment's
 *   `site-packages`, whose `.pth` files run at start, are the folder's;
 * - an argument that is an absolute path lies in a workspace folder (a script it would run);
 * - an absolute `PYTHONPATH` entry lies in a workspace folder (its modules would shadow the
 *   server's own imports).
 *
 * The Python extension's selection is the workspace's by definition; python.ts does not ask
 * for it while the workspace is untrusted.
 *
 * No `vscode` import here: tests run this module under plain Node.
 */
import * as fs from "fs";
import * as path from "path";

/** What is about to be started: the same fields as launch.Launch. */
export interface Start {
  command: string;
  args: readonly string[];
  cwd: string;
  env: Readonly<Record<string, string>>;
}

/** `VAR` of `env`, looked up without regard to case on Windows (where `Path` is usual). */
function envValue(env: Readonly<Record<string, string>>, name: string, platform: NodeJS.Platform): string | undefined {
  if (platform !== "win32") {
    return env[name];
  }
  return Object.entries(env).find(([key]) => key.toUpperCase() === name)?.[1];
}

/** Whether `target` is `folder` or lies below it (both absolute). */
export function isInside(target: string, folder: string): boolean {
  const relative = path.relative(folder, target);
  return relative === "" || !(relative === ".." || relative.startsWith(`..${path.sep}`) || path.isAbsolute(relative));
}

function realPath(file: string): string {
  try {
    return fs.realpathSync.native(file);
  } catch {
    return path.resolve(file);
  }
}

/**
 * The workspace folder that holds `file`, by the path as written or by its real path
 * (symbolic links resolved on both sides); undefined when no folder does.
 */
export function folderHolding(file: string, folders: readonly string[]): string | undefined {
  const written = path.resolve(file);
  const real = realPath(file);
  return folders.find((folder) => isInside(written, path.resolve(folder)) || isInside(real, realPath(folder)));
}

function isExecutableFile(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

/**
 * The file that starting `command` in `cwd` runs, searched as Node's `spawn` does: a command
 * with a directory part is resolved against `cwd`; a bare name is looked up on `PATH` (on
 * Windows `cwd` first, and with `.com` and `.exe` appended). Undefined when a bare name is
 * found nowhere: the start then fails with ENOENT and runs nothing.
 */
export function locateProgram(
  command: string,
  cwd: string,
  pathEnv: string | undefined,
  platform: NodeJS.Platform = process.platform,
): string | undefined {
  if (command.includes("/") || (platform === "win32" && command.includes("\\"))) {
    return path.resolve(cwd, command);
  }
  const directories = (pathEnv ?? "").split(path.delimiter).filter((entry) => entry.length > 0);
  if (platform === "win32") {
    directories.unshift(cwd);
  }
  const names = platform === "win32" ? [command, `${command}.com`, `${command}.exe`] : [command];
  for (const directory of directories) {
    for (const name of names) {
      const candidate = path.resolve(cwd, directory, name);
      if (isExecutableFile(candidate)) {
        return candidate;
      }
    }
  }
  return undefined;
}

/**
 * Why `start` belongs to the workspace (see the module comment), or undefined when it may run
 * in an untrusted workspace. `workspaceChoice` says how the workspace chose the program, when
 * the configuration already tells (`${workspaceFolder}`, the Python extension's selection).
 */
export function workspaceOwnedReason(
  start: Start,
  folders: readonly string[],
  workspaceChoice: string | undefined,
  platform: NodeJS.Platform = process.platform,
): string | undefined {
  if (workspaceChoice !== undefined) {
    return workspaceChoice;
  }
  const program = locateProgram(start.command, start.cwd, envValue(start.env, "PATH", platform), platform);
  const programFolder = program === undefined ? undefined : folderHolding(program, folders);
  if (programFolder !== undefined) {
    return `${program} lies in the workspace folder ${programFolder}`;
  }
  for (const arg of start.args.filter((a) => path.isAbsolute(a))) {
    const folder = folderHolding(arg, folders);
    if (folder !== undefined) {
      return `its argument ${arg} lies in the workspace folder ${folder}`;
    }
  }
  const pythonPath = envValue(start.env, "PYTHONPATH", platform) ?? "";
  for (const entry of pythonPath.split(path.delimiter).filter((e) => path.isAbsolute(e))) {
    const folder = folderHolding(entry, folders);
    if (folder !== undefined) {
      return `PYTHONPATH entry ${entry} lies in the workspace folder ${folder}`;
    }
  }
  return undefined;
}
