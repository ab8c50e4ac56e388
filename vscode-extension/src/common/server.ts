/**
 * Starting, restarting and stopping the fxls language server (`fxls serve` over stdio).
 *
 * Each start reads the settings afresh, so a restart picks up a new interpreter, server
 * command or trust state. Restarts are serialised: a restart requested while one is running
 * waits for it, and only the latest settings are used.
 *
 * Two processes are started per start, the probe and the server, both with the same program.
 * In an untrusted workspace each goes through `mayStart` first: a program the workspace chose
 * (./trust.ts) is not run, and the server starts when trust is granted (extension.ts restarts).
 */
import { execFile } from "child_process";
import * as fs from "fs";
import * as path from "path";
import * as vscode from "vscode";
import {
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State,
  TransportKind,
} from "vscode-languageclient/node";
import { CONFIG_SECTION, COMMAND_SHOW_GRAPH, COMMAND_SHOW_LOG, EXTENSION_NAME } from "./constants";
import { className } from "./graph-core";
import { bundledLibsDir, chooseFxls, FxlsSource, Launch, SERVER_MODULE_ARGS, serverLaunch } from "./launch";
import { classifyProbe, Problem, PROBE_CODE, ProbeRun } from "./probe";
import { InterpreterSource, resolveInterpreter } from "./python";
import { getInitializationOptions, getServerCommandSetting } from "./settings";
import { StatusItem } from "./status";
import { notificationText } from "./text";
import { workspaceOwnedReason } from "./trust";

export interface ServerCommand {
  command: string;
  args: string[];
  /** Where the command came from, for the log. */
  origin: string;
  /** Set when the command is `<interpreter> -m fxls serve` (not fxls.server.command). */
  interpreterSource?: InterpreterSource;
  /** How the workspace chose the program, when the configuration tells (see ./trust.ts). */
  workspaceChoice?: string;
}

/** Longest message the extension words itself (notification, status): its advice plus a path or two fit. */
const MESSAGE_LIMIT = 1000;

const SOURCE_TEXT: Record<InterpreterSource, string> = {
  setting: "the fxls.python setting",
  "python-extension": "the interpreter selected in the Python extension",
  default: "python3 from PATH",
};

/** Runs the probe (see ./probe.ts) with `launch`'s working directory and environment. */
export function runProbe(python: string, launch: Launch, timeoutMs = 20000): Promise<ProbeRun> {
  return new Promise((resolve) => {
    execFile(
      python,
      ["-c", PROBE_CODE],
      { cwd: launch.cwd, env: launch.env, timeout: timeoutMs, windowsHide: true },
      (error, stdout, stderr) => {
        const code = (error as NodeJS.ErrnoException | null)?.code;
        if (error && typeof code === "string" && !/^\d+$/.test(code)) {
          resolve({ spawnError: code, exitCode: null, stdout: "", stderr: String(stderr) });
          return;
        }
        const exitCode = error ? (typeof code === "number" ? code : 1) : 0;
        resolve({ exitCode, stdout: String(stdout), stderr: String(stderr) });
      },
    );
  });
}

/**
 * The command line that starts the server for `resource`'s workspace folder; the Python
 * extension is asked for an interpreter only when `trusted`.
 */
export async function resolveServerCommand(resource: vscode.Uri | undefined, trusted: boolean): Promise<ServerCommand> {
  const configured = getServerCommandSetting(resource);
  if (configured.length > 0) {
    return { command: configured[0], args: configured.slice(1), origin: "fxls.server.command" };
  }
  const interpreter = await resolveInterpreter(resource, trusted);
  return {
    command: interpreter.path,
    args: SERVER_MODULE_ARGS,
    origin: `interpreter from ${interpreter.source}`,
    interpreterSource: interpreter.source,
    workspaceChoice: interpreter.workspaceChoice,
  };
}

/** `lenses` plus a "Show graph" lens after each lens on a `class` line. */
function withGraphLenses(document: vscode.TextDocument, lenses: vscode.CodeLens[]): vscode.CodeLens[] {
  const out: vscode.CodeLens[] = [];
  const seen = new Set<number>();
  for (const lens of lenses) {
    out.push(lens);
    const line = lens.range.start.line;
    const cls = line < document.lineCount ? className(document.lineAt(line).text) : undefined;
    if (cls && !seen.has(line)) {
      seen.add(line);
      out.push(
        new vscode.CodeLens(lens.range, {
          title: "$(type-hierarchy) Show graph",
          command: COMMAND_SHOW_GRAPH,
          arguments: [document.uri, cls],
        }),
      );
    }
  }
  return out;
}

function workspaceResource(): vscode.Uri | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri;
}

/** The workspace folders on disk (the folders whose content an untrusted workspace owns). */
function workspaceFolderPaths(): string[] {
  return (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === "file").map((f) => f.uri.fsPath);
}

export class ServerManager implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private queue: Promise<void> = Promise.resolve();
  private pending: { timer: NodeJS.Timeout; done: Promise<void> } | undefined;
  private disposed = false;

  /**
   * @param neutralDir the server's working directory: a folder the extension owns (never the
   *   workspace, whose modules would shadow the server's own; see ./launch.ts).
   */
  constructor(
    private readonly output: vscode.LogOutputChannel,
    private readonly status: StatusItem,
    private readonly neutralDir: string,
    private readonly extensionVersion: string,
  ) {}

  /** The running language client, if any. */
  get languageClient(): LanguageClient | undefined {
    return this.client;
  }

  /** Stops any running server and starts a new one with the current settings. */
  restart(): Promise<void> {
    this.queue = this.queue.then(async () => {
      await this.stopClient();
      if (!this.disposed) {
        await this.startClient();
      }
    });
    return this.queue;
  }

  /**
   * Restarts after `delayMs` of quiet. Events that come together (granting trust also changes
   * the effective configuration, which fires a configuration change) restart once.
   */
  requestRestart(delayMs = 250): Promise<void> {
    if (this.pending) {
      this.pending.timer.refresh();
      return this.pending.done;
    }
    let timer: NodeJS.Timeout | undefined;
    const done = new Promise<void>((resolve, reject) => {
      timer = setTimeout(() => {
        this.pending = undefined;
        this.restart().then(resolve, reject);
      }, delayMs);
    });
    this.pending = { timer: timer!, done };
    return done;
  }

  stop(): Promise<void> {
    this.queue = this.queue.then(() => this.stopClient());
    return this.queue;
  }

  private async startClient(): Promise<void> {
    const resource = workspaceResource();
    const trusted = vscode.workspace.isTrusted;
    const server = await resolveServerCommand(resource, trusted);
    this.status.set("starting");
    let launch = serverLaunch(server.command, server.args, this.neutralDir, process.env);
    let fxls: FxlsSource | undefined;
    if (server.interpreterSource) {
      if (!this.mayStart(server, launch)) {
        return;
      }
      const source = SOURCE_TEXT[server.interpreterSource];
      const probe = classifyProbe(await runProbe(server.command, launch), server.command, source);
      if (!probe.ok) {
        this.output.error(probe.problem.message);
        this.status.set("error", probe.problem.message);
        void this.notify(probe.problem);
        return;
      }
      const info = probe.info;
      const bundled = bundledLibsDir(this.neutralDir);
      const hasBundled = fs.existsSync(path.join(bundled, "fxls", "__init__.py"));
      fxls = chooseFxls(info.fxls, this.extensionVersion, hasBundled);
      this.output.info(
        `Python ${info.python} (${info.executable}), torch ${info.torch}; ` +
          (fxls === "bundled"
            ? `fxls ${this.extensionVersion} bundled with the extension (${bundled})` +
              (info.fxls ? `, not the older fxls ${info.fxls} installed in the interpreter` : "")
            : `fxls ${info.fxls ?? "(not found)"} installed in the interpreter`),
      );
      if (probe.problem) {
        this.output.warn(probe.problem.message);
        void this.notify(probe.problem);
      }
      if (fxls === "bundled") {
        launch = serverLaunch(server.command, server.args, this.neutralDir, process.env, bundled);
      }
    }
    if (!this.mayStart(server, launch)) {
      return;
    }
    this.output.info(
      `Starting: ${[server.command, ...server.args].join(" ")} (${server.origin}` +
        `${fxls ? `; fxls ${fxls}` : ""}; workspace ${trusted ? "trusted" : "NOT trusted: restricted mode"})`,
    );

    const serverOptions: ServerOptions = {
      command: launch.command,
      args: launch.args,
      transport: TransportKind.stdio,
      options: { cwd: launch.cwd, env: launch.env },
    };
    const clientOptions: LanguageClientOptions = {
      // Python files, and the Python cells of Jupyter notebooks (synced as notebooks: the
      // server analyses a notebook's cells together, as one module).
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" },
        { notebook: "jupyter-notebook", language: "python" },
      ],
      outputChannel: this.output,
      traceOutputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: getInitializationOptions(resource),
      synchronize: { configurationSection: CONFIG_SECTION },
      middleware: {
        // After each class lens of the server, a "Show graph" link for that class.
        provideCodeLenses: async (document, token, next) => {
          const lenses = (await next(document, token)) ?? [];
          return withGraphLenses(document, lenses);
        },
      },
    };
    const client = new LanguageClient(CONFIG_SECTION, EXTENSION_NAME, serverOptions, clientOptions);
    client.onDidChangeState((event) => {
      if (client !== this.client) {
        return;
      }
      if (event.newState === State.Running) {
        this.status.set(trusted ? "running" : "restricted", server.command);
      } else if (event.newState === State.Starting) {
        this.status.set("starting", server.command);
      } else if (this.status.state !== "error") {
        this.status.set("stopped", server.command);
      }
    });
    this.client = client;
    try {
      await client.start();
    } catch (error) {
      this.status.set("error", String(error));
      this.output.error(`The fxls server did not start: ${String(error)}`);
      void this.reportStartFailure(server, error);
    }
  }

  /**
   * Whether `launch` may run now: always in a trusted workspace; in an untrusted one only
   * when the workspace did not choose its program (./trust.ts). When it may not, the status
   * bar and the log say that it starts once the workspace is trusted.
   */
  private mayStart(server: ServerCommand, launch: Launch): boolean {
    if (vscode.workspace.isTrusted) {
      return true;
    }
    const reason = workspaceOwnedReason(launch, workspaceFolderPaths(), server.workspaceChoice);
    if (reason === undefined) {
      return true;
    }
    const waiting = notificationText(
      `"${server.command}" (${server.origin}) runs once the workspace is trusted: ${reason}`,
      MESSAGE_LIMIT,
    );
    this.output.info(`Not starting the server in restricted mode. ${waiting}`);
    this.status.set("restricted", waiting);
    return false;
  }

  /** Shows `problem` with its buttons (copy the fix, open the setting, show the log). */
  private async notify(problem: Problem): Promise<void> {
    const labels = { copyCommand: "Copy Command", openSetting: "Open Setting", showLog: "Show Log" };
    const buttons = problem.actions.map((action) => labels[action]);
    const show = problem.severity === "error" ? vscode.window.showErrorMessage : vscode.window.showWarningMessage;
    const choice = await show(notificationText(problem.message, MESSAGE_LIMIT), ...buttons);
    if (choice === labels.copyCommand && problem.command) {
      await vscode.env.clipboard.writeText(problem.command);
    } else if (choice === labels.openSetting) {
      await vscode.commands.executeCommand("workbench.action.openSettings", "fxls.python");
    } else if (choice === labels.showLog) {
      await vscode.commands.executeCommand(COMMAND_SHOW_LOG);
    }
  }

  private async reportStartFailure(server: ServerCommand, error: unknown): Promise<void> {
    const openSettings = "Open Settings";
    const showOutput = "Show Log";
    const choice = await vscode.window.showErrorMessage(
      notificationText(
        `fxls: could not start the language server with "${server.command}" (${String(error)}). ` +
          "Set fxls.python to a Python 3.10+ interpreter with torch installed.",
        MESSAGE_LIMIT,
      ),
      openSettings,
      showOutput,
    );
    if (choice === openSettings) {
      await vscode.commands.executeCommand("workbench.action.openSettings", "fxls.python");
    } else if (choice === showOutput) {
      await vscode.commands.executeCommand(COMMAND_SHOW_LOG);
    }
  }

  private async stopClient(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (!client) {
      return;
    }
    try {
      // Waits up to 2 s for shutdown/exit, then the client kills the process.
      await client.dispose(2000);
    } catch (error) {
      this.output.warn(`Stopping the fxls server: ${String(error)}`);
    }
    this.status.set("stopped");
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    if (this.pending) {
      clearTimeout(this.pending.timer);
      this.pending = undefined;
    }
    await this.stop();
  }
}
