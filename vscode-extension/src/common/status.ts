/** The fxls item in the status bar: what the server is doing, a click shows the log. */
import * as vscode from "vscode";
import { COMMAND_SHOW_LOG } from "./constants";

export type ServerState = "starting" | "running" | "restricted" | "stopped" | "error";

const ICONS: Record<ServerState, string> = {
  starting: "$(loading~spin)",
  running: "$(check)",
  restricted: "$(shield)",
  stopped: "$(circle-slash)",
  error: "$(error)",
};

const TOOLTIPS: Record<ServerState, string> = {
  starting: "fxls: starting the language server",
  running: "fxls: language server running",
  restricted:
    "fxls: restricted mode. This workspace is not trusted, so fxls runs none of its code " +
    "(no shapes, no trace diagnostics). Trust the workspace to enable them.",
  stopped: "fxls: language server stopped",
  error: "fxls: the language server failed; click for its output",
};

export class StatusItem implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private current: ServerState = "stopped";

  constructor() {
    this.item = vscode.window.createStatusBarItem("fxls.status", vscode.StatusBarAlignment.Right, 100);
    this.item.name = "fxls";
    this.item.command = COMMAND_SHOW_LOG;
    this.set("stopped");
    this.item.show();
  }

  get state(): ServerState {
    return this.current;
  }

  /** Shows `state`; `detail` is appended to the tooltip (for example the server command). */
  set(state: ServerState, detail?: string): void {
    this.current = state;
    this.item.text = `${ICONS[state]} fxls`;
    this.item.tooltip = detail ? `${TOOLTIPS[state]}\n${detail}` : TOOLTIPS[state];
    this.item.backgroundColor = state === "error" ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  }

  dispose(): void {
    this.item.dispose();
  }
}
