/**
 * "fxls: Trace Class at Cursor" (command palette and the editor's context menu): asks the
 * server to capture the document now and report the module class at the cursor
 * (`workspace/executeCommand` `fxls.traceClass`, see ./trace-core.ts), with a progress
 * notification while it runs. The answer shows as a notification (the class summary, with
 * "Show Graph" and "Details" buttons); the details always go to the fxls log.
 */
import * as vscode from "vscode";
import { ExecuteCommandRequest, LanguageClient } from "vscode-languageclient/node";
import { COMMAND_SHOW_GRAPH } from "./constants";
import { asTraceAnswer, isCaptured, severityOf, TRACE_SERVER_COMMAND, traceLog, traceMessage } from "./trace-core";

const SHOW_GRAPH = "Show Graph";
const DETAILS = "Details";
const MANAGE_TRUST = "Manage Workspace Trust";

export class TraceCommand {
  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly output: vscode.LogOutputChannel,
  ) {}

  async run(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.languageId !== "python") {
      void vscode.window.showInformationMessage(
        "fxls: open a Python file and put the cursor in an nn.Module class to trace it.",
      );
      return;
    }
    if (!vscode.workspace.isTrusted) {
      const choice = await vscode.window.showWarningMessage(
        "fxls: this workspace is not trusted, so fxls runs none of its code and traces nothing.",
        MANAGE_TRUST,
      );
      if (choice === MANAGE_TRUST) {
        await vscode.commands.executeCommand("workbench.trust.manage");
      }
      return;
    }
    const client = this.client();
    if (!client || !client.isRunning()) {
      void vscode.window.showErrorMessage("fxls: the language server is not running; see fxls: Show Log.");
      return;
    }
    const document = editor.document;
    const params = client.code2ProtocolConverter.asTextDocumentPositionParams(document, editor.selection.active);
    const raw = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "fxls: tracing the class at the cursor…" },
      () =>
        client.sendRequest(ExecuteCommandRequest.type, { command: TRACE_SERVER_COMMAND, arguments: [params] }).then(
          (value) => value as unknown,
          (error: unknown) => ({ kind: "error", message: `fxls: the trace failed: ${String(error)}` }),
        ),
    );
    const answer = asTraceAnswer(raw) ?? { kind: "error", message: "fxls: the server gave no answer." };
    for (const line of traceLog(answer)) {
      this.output.info(line);
    }
    const buttons: string[] = [];
    if (isCaptured(answer) && answer.graph) {
      buttons.push(SHOW_GRAPH);
    }
    if (isCaptured(answer)) {
      buttons.push(DETAILS);
    }
    if (answer.kind === "untrusted") {
      buttons.push(MANAGE_TRUST);
    }
    const show =
      severityOf(answer) === "info" ? vscode.window.showInformationMessage : vscode.window.showWarningMessage;
    const choice = await show(traceMessage(answer), ...buttons);
    if (choice === SHOW_GRAPH) {
      await vscode.commands.executeCommand(COMMAND_SHOW_GRAPH, document.uri, answer.className);
    } else if (choice === DETAILS) {
      this.output.show(true);
    } else if (choice === MANAGE_TRUST) {
      await vscode.commands.executeCommand("workbench.trust.manage");
    }
  }
}
