/**
 * "fxls: Show graph": the graph of one module class in a webview, from the server's last
 * capture of the document (custom request `fxls/graph`). Clicking a node reveals its line.
 */
import { randomBytes } from "crypto";
import * as vscode from "vscode";
import { LanguageClient } from "vscode-languageclient/node";
import { classAt, classesIn, isRevealMessage, webviewHtml } from "./graph-core";

export const GRAPH_REQUEST = "fxls/graph";

interface GraphAnswer {
  html?: string;
  nodes?: number;
  error?: string;
}

/** The class to draw: the argument, else the one around the cursor, else a pick. */
async function pickClass(document: vscode.TextDocument, cursorLine: number | undefined): Promise<string | undefined> {
  const lines = document.getText().split(/\r?\n/);
  if (cursorLine !== undefined) {
    const around = classAt(lines, cursorLine);
    if (around) {
      return around;
    }
  }
  const classes = classesIn(lines);
  if (classes.length <= 1) {
    return classes[0]?.name;
  }
  return vscode.window.showQuickPick(
    classes.map((c) => c.name),
    { placeHolder: "fxls: the graph of which class?" },
  );
}

export class GraphView implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private source: vscode.Uri | undefined;

  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly output: vscode.LogOutputChannel,
  ) {}

  async show(uri?: vscode.Uri, cls?: string): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const target = uri instanceof vscode.Uri ? uri : editor?.document.uri;
    if (!target) {
      void vscode.window.showInformationMessage("fxls: open a Python file with a module class to see its graph.");
      return;
    }
    const document = await vscode.workspace.openTextDocument(target);
    const cursor =
      editor && editor.document.uri.toString() === target.toString() ? editor.selection.active.line : undefined;
    const name = typeof cls === "string" ? cls : await pickClass(document, cursor);
    if (!name) {
      void vscode.window.showInformationMessage("fxls: this file has no class to draw.");
      return;
    }
    const client = this.client();
    if (!client || !client.isRunning()) {
      void vscode.window.showErrorMessage("fxls: the language server is not running; see fxls: Show Log.");
      return;
    }
    const answer = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Window, title: `fxls: graph of ${name}` },
      () => client.sendRequest<GraphAnswer>(GRAPH_REQUEST, { uri: target.toString(), className: name }),
    );
    if (!answer?.html) {
      const message = `fxls: no graph for ${name}: ${answer?.error ?? "no answer from the server"}`;
      this.output.warn(message);
      void vscode.window.showWarningMessage(message);
      return;
    }
    this.output.info(`Graph of ${name}: ${answer.nodes ?? "?"} nodes`);
    this.source = target;
    if (!this.panel) {
      this.panel = vscode.window.createWebviewPanel(
        "fxls.graph",
        `fxls graph: ${name}`,
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        { enableScripts: true, localResourceRoots: [], retainContextWhenHidden: true },
      );
      this.panel.onDidDispose(() => (this.panel = undefined));
      this.panel.webview.onDidReceiveMessage((message) => void this.reveal(message));
    }
    this.panel.title = `fxls graph: ${name}`;
    const nonce = randomBytes(16).toString("base64");
    this.panel.webview.html = webviewHtml(answer.html, nonce, this.panel.webview.cspSource);
    this.panel.reveal(undefined, true);
  }

  private async reveal(message: unknown): Promise<void> {
    if (!isRevealMessage(message) || !this.source) {
      return;
    }
    const document = await vscode.workspace.openTextDocument(this.source);
    const line = Math.min(message.line - 1, document.lineCount - 1);
    const position = new vscode.Position(line, message.col);
    const editor = await vscode.window.showTextDocument(document, {
      viewColumn: vscode.ViewColumn.One,
      selection: new vscode.Range(position, position),
      preserveFocus: false,
    });
    editor.revealRange(new vscode.Range(position, position), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  }

  dispose(): void {
    this.panel?.dispose();
  }
}
