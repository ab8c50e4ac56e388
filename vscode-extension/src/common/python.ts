/**
 * Which Python interpreter runs `python -m fxls serve`.
 *
 * Order: the `fxls.python` setting; else the interpreter selected in the Python extension
 * (ms-python.python) when it is installed; else `python3` from PATH. The Python extension is
 * optional: fxls never requires it and talks to it only through the small interface below.
 */
import * as vscode from "vscode";
import { PYTHON_EXTENSION_ID } from "./constants";
import { getPythonSetting } from "./settings";

export type InterpreterSource = "setting" | "python-extension" | "default";

export interface Interpreter {
  path: string;
  source: InterpreterSource;
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

export async function resolveInterpreter(resource?: vscode.Uri): Promise<Interpreter> {
  const fromSetting = getPythonSetting(resource);
  if (fromSetting) {
    return { path: fromSetting, source: "setting" };
  }
  const fromExtension = await pythonExtensionInterpreter(resource);
  if (fromExtension) {
    return { path: fromExtension, source: "python-extension" };
  }
  return { path: DEFAULT_INTERPRETER, source: "default" };
}

/** Calls `listener` when the Python extension's selected interpreter changes. */
export async function onDidChangePythonInterpreter(
  listener: () => void,
): Promise<vscode.Disposable | undefined> {
  const environments = await pythonEnvironments();
  return environments?.onDidChangeActiveEnvironmentPath(listener);
}
