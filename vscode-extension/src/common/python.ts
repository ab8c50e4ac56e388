/**
 * Which Python interpreter runs `python -m fxls serve`.
 *
 * Order: the `fxls.python` setting; else the interpreter selected in the Python extension
 * (ms-python.python) when it is installed; else `python3` from PATH. The Python extension is
 * optional: fxls never requires it and talks to it only through the small interface below.
 *
 * The Python extension's selection is the workspace's (its `python.defaultInterpreterPath`, a
 * `.venv` it found in the folder), so it is asked for only in a trusted workspace; an
 * untrusted one gets the setting or `python3`. Whether those may run there is ./trust.ts's
 * question, asked before anything starts (server.ts).
 */
import * as vscode from "vscode";
import { PYTHON_EXTENSION_ID } from "./constants";
import { getPythonSetting } from "./settings";

export type InterpreterSource = "setting" | "python-extension" | "default";

export interface Interpreter {
  path: string;
  source: InterpreterSource;
  /** How the workspace chose this interpreter, when it did (see ./trust.ts). */
  workspaceChoice?: string;
}

/** The part of the Python extension's API that fxls uses. */
interface PythonEnvironmentsApi {
  getActiveEnvironmentPath(resource?: vscode.Uri): { id: string; path: string };
  resolveEnvironment(
    environment: { id: string; path: string } | string,
  ): Promise<{ executable: { uri?: vscode.Uri } } | undefined>;
  onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
}

interface PythonExtensionApi {
  environments?: PythonEnvironmentsApi;
}

export const DEFAULT_INTERPRETER = "python3";

async function pythonEnvironments(): Promise<PythonEnvironmentsApi | undefined> {
  const extension = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION_ID);
  if (!extension) {
    return undefined;
  }
  try {
    const api = extension.isActive ? extension.exports : await extension.activate();
    return api?.environments;
  } catch {
    return undefined;
  }
}

/** The Python extension's active interpreter for `resource`, if it is installed and has one. */
async function pythonExtensionInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
  const environments = await pythonEnvironments();
  if (!environments) {
    return undefined;
  }
  try {
    const active = environments.getActiveEnvironmentPath(resource);
    const resolved = await environments.resolveEnvironment(active);
    return resolved?.executable.uri?.fsPath ?? active.path;
  } catch {
    return undefined;
  }
}

/** The interpreter for `resource`; the Python extension is asked only when `trusted`. */
export async function resolveInterpreter(resource: vscode.Uri | undefined, trusted: boolean): Promise<Interpreter> {
  const fromSetting = getPythonSetting(resource);
  if (fromSetting.path) {
    const workspaceChoice = fromSetting.namesWorkspace ? "fxls.python is set with ${workspaceFolder}" : undefined;
    return { path: fromSetting.path, source: "setting", workspaceChoice };
  }
  const fromExtension = trusted ? await pythonExtensionInterpreter(resource) : undefined;
  if (fromExtension) {
    const workspaceChoice = "the Python extension chose it for the workspace";
    return { path: fromExtension, source: "python-extension", workspaceChoice };
  }
  return { path: DEFAULT_INTERPRETER, source: "default" };
}

/** Calls `listener` when the Python extension's selected interpreter changes. */
export async function onDidChangePythonInterpreter(listener: () => void): Promise<vscode.Disposable | undefined> {
  const environments = await pythonEnvironments();
  return environments?.onDidChangeActiveEnvironmentPath(listener);
}
