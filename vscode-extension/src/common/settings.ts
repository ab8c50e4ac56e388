/**
 * Reading the `fxls.*` settings.
 *
 * The server settings mirror `fxls/engine/settings.py` (same names and defaults; a test compares
 * package.json with it). They are sent nested, camelCase, as the language server's
 * `initializationOptions`, together with `trusted`; later changes reach the server through
 * `workspace/didChangeConfiguration` and `workspace/configuration`.
 *
 * The protected settings (`fxls.python`, `fxls.server.command`, `fxls.limits.*`,
 * `fxls.isolation.*`) decide what runs outside the sandbox and how strong it is. They are
 * machine-scoped in package.json, and read here from the user's (or remote) settings or the
 * default only, never from a workspace or folder, whatever VS Code's version does with scopes.
 * The server takes them from `initializationOptions` only and ignores them in configuration
 * answers; a change restarts the server (constants.RESTART_SETTINGS).
 */
import * as vscode from "vscode";
import { CONFIG_SECTION } from "./constants";

export interface LimitsSettings {
  timeoutSeconds: number;
  cpuSeconds: number;
  memoryMB: number;
  fileSizeMB: number;
}

/** Settings the server reads. Client-only ones (`server.command`, `trace.server`) are not here. */
export interface ServerSettings {
  python: string;
  limits: LimitsSettings;
  debounceMs: number;
  inlayHints: { enabled: boolean };
  codeLens: { enabled: boolean };
  isolation: { seccomp: boolean; landlock: boolean };
  capture: { metaInit: boolean; symbolic: boolean };
}

/** What the client sends as `initializationOptions`. */
export interface InitializationOptions extends ServerSettings {
  /** False in an untrusted workspace: the server then runs no user code. */
  trusted: boolean;
}

function config(resource?: vscode.Uri): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration(CONFIG_SECTION, resource);
}

/** A protected setting: the user's (or remote) value, else the default; never a workspace's. */
export function userValue<T>(c: vscode.WorkspaceConfiguration, key: string, fallback: T): T {
  const inspected = c.inspect<T>(key);
  return inspected?.globalValue ?? inspected?.defaultValue ?? fallback;
}

/** The server settings as the user has them (defaults come from package.json). */
export function getServerSettings(resource?: vscode.Uri): ServerSettings {
  const c = config(resource);
  return {
    python: getPythonSetting(resource).path,
    limits: {
      timeoutSeconds: userValue<number>(c, "limits.timeoutSeconds", 20),
      cpuSeconds: userValue<number>(c, "limits.cpuSeconds", 10),
      memoryMB: userValue<number>(c, "limits.memoryMB", 2048),
      fileSizeMB: userValue<number>(c, "limits.fileSizeMB", 64),
    },
    debounceMs: c.get<number>("debounceMs", 300),
    inlayHints: { enabled: c.get<boolean>("inlayHints.enabled", true) },
    codeLens: { enabled: c.get<boolean>("codeLens.enabled", true) },
    isolation: {
      seccomp: userValue<boolean>(c, "isolation.seccomp", true),
      landlock: userValue<boolean>(c, "isolation.landlock", true),
    },
    capture: {
      metaInit: c.get<boolean>("capture.metaInit", true),
      symbolic: c.get<boolean>("capture.symbolic", true),
    },
  };
}

export function getInitializationOptions(resource?: vscode.Uri): InitializationOptions {
  return { ...getServerSettings(resource), trusted: vscode.workspace.isTrusted };
}

/** `fxls.server.command` with empty entries dropped; empty means "use the interpreter". */
export function getServerCommandSetting(resource?: vscode.Uri): string[] {
  const value = userValue<unknown>(config(resource), "server.command", []);
  if (!Array.isArray(value)) {
    return [];
  }
  return value.filter((part): part is string => typeof part === "string" && part.length > 0);
}

/** `fxls.python` expanded, and whether the open folder decides it (see `getPythonSetting`). */
export interface PythonSetting {
  path: string;
  /** The value uses `${workspaceFolder}`: the folder that is open decides what runs. */
  namesWorkspace: boolean;
}

/** `fxls.python`, with `~` and `${workspaceFolder}` expanded. */
export function getPythonSetting(resource?: vscode.Uri): PythonSetting {
  const value = userValue<string>(config(resource), "python", "").trim();
  return { path: expandPath(value, resource), namesWorkspace: value.includes("${workspaceFolder") };
}

export function expandPath(value: string, resource?: vscode.Uri): string {
  if (!value) {
    return value;
  }
  const home = process.env.HOME ?? process.env.USERPROFILE ?? "";
  let out = value.replace(/^~(?=$|[\\/])/, home);
  const folder = (resource && vscode.workspace.getWorkspaceFolder(resource)) ?? vscode.workspace.workspaceFolders?.[0];
  if (folder) {
    out = out.replace(/\$\{workspaceFolder\}/g, folder.uri.fsPath);
  }
  return out;
}
