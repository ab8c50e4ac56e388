/** Entry point: activation only. The logic lives in ./common. */
import * as vscode from "vscode";
import {
  COMMAND_RESTART,
  COMMAND_SHOW_GRAPH,
  COMMAND_SHOW_LOG,
  COMMAND_SHOW_OUTPUT,
  COMMAND_TRACE,
  EXTENSION_NAME,
  RESTART_SETTINGS,
} from "./common/constants";
import { GraphView } from "./common/graph";
import { onDidChangePythonInterpreter } from "./common/python";
import { ServerManager } from "./common/server";
import { getPythonSetting, getServerCommandSetting } from "./common/settings";
import { StatusItem } from "./common/status";
import { TraceCommand } from "./common/trace";

let manager: ServerManager | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel(EXTENSION_NAME, { log: true });
  const status = new StatusItem();
  const packageJSON = context.extension.packageJSON as { version?: string };
  const version = String(packageJSON.version ?? "0.0.0");
  manager = new ServerManager(output, status, context.extensionUri.fsPath, version);
  const server = manager;
  const graph = new GraphView(() => server.languageClient, output);
  const trace = new TraceCommand(() => server.languageClient, output);
  const showLog = () => output.show(true);
  context.subscriptions.push(
    output,
    status,
    graph,
    { dispose: () => void server.dispose() },
    vscode.commands.registerCommand(COMMAND_RESTART, () => server.restart()),
    vscode.commands.registerCommand(COMMAND_SHOW_LOG, showLog),
    vscode.commands.registerCommand(COMMAND_SHOW_OUTPUT, showLog),
    vscode.commands.registerCommand(COMMAND_SHOW_GRAPH, (uri?: vscode.Uri, cls?: string) => graph.show(uri, cls)),
    vscode.commands.registerCommand(COMMAND_TRACE, () => trace.run()),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (RESTART_SETTINGS.some((name) => event.affectsConfiguration(name))) {
        void server.requestRestart();
      }
    }),
    // Restricted mode ends: restart, now with the interpreter the workspace chose (if any) and
    // a server that may run the workspace's code in its sandbox.
    vscode.workspace.onDidGrantWorkspaceTrust(() => void server.requestRestart()),
  );
  // The Python extension's selection is used in a trusted workspace only (see ./common/python.ts).
  const interpreterListener = await onDidChangePythonInterpreter(() => {
    if (vscode.workspace.isTrusted && !getPythonSetting().path && getServerCommandSetting().length === 0) {
      void server.requestRestart();
    }
  });
  if (interpreterListener) {
    context.subscriptions.push(interpreterListener);
  }
  await server.restart();
}

export async function deactivate(): Promise<void> {
  await manager?.stop();
  manager = undefined;
}
