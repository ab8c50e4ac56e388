/**
 * Starting, restarting and stopping the fxls language server (`fxls serve` over stdio).
 *
 * Each start reads the settings afresh, so a restart picks up a new interpreter, server
 * command or trust state. Restarts are serialised: a restart requested while one is running
 * waits for it, and only the latest settings are used.
 */
import * as vscode from "vscode";
import {
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State,
  TransportKind,
} from "vscode-languageclient/node";
import { CONFIG_SECTION, COMMAND_SHOW_OUTPUT, EXTENSION_NAME } from "./constants";
import { SERVER_MODULE_ARGS, serverLaunch } from "./launch";
import { resolveInterpreter } from "./python";
import { getInitializationOptions, getServerCommandSetting } from "./settings";
import { StatusItem } from "./status";

export interface ServerCommand {
  command: string;
  args: string[];
  /** Where the command came from, for the log. */
  origin: string;
}

/** The command line that starts the server for `resource`'s workspace folder. */
export async function resolveServerCommand(resource?: vscode.Uri): Promise<ServerCommand> {
  const configured = getServerCommandSetting(resource);
  if (configured.length > 0) {
    return { command: configured[0], args: configured.slice(1), origin: "fxls.server.command" };
  }
  const interpreter = await resolveInterpreter(resource);
  return {
    command: interpreter.path,
    args: SERVER_MODULE_ARGS,
    origin: `interpreter from ${interpreter.source}`,
  };
}

function workspaceResource(): vscode.Uri | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri;
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
  ) {}

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
   * Restarts after `delayMs` of quiet. Events that come together (granting trust also makes
   * the workspace's `fxls.python` apply, which is a configuration change) restart once.
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
    const server = await resolveServerCommand(resource);
    const launch = serverLaunch(server.command, server.args, this.neutralDir, process.env);
    this.output.info(
      `Starting: ${[server.command, ...server.args].join(" ")} (${server.origin}; ` +
        `workspace ${trusted ? "trusted" : "NOT trusted: restricted mode"})`,
    );
    this.status.set("starting");

    const serverOptions: ServerOptions = {
      command: launch.command,
      args: launch.args,
      transport: TransportKind.stdio,
      options: { cwd: launch.cwd, env: launch.env },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" },
      ],
      outputChannel: this.output,
      traceOutputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: getInitializationOptions(resource),
      synchronize: { configurationSection: CONFIG_SECTION },
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

  private async reportStartFailure(server: ServerCommand, error: unknown): Promise<void> {
    const openSettings = "Open Settings";
    const showOutput = "Show Output";
    const choice = await vscode.window.showErrorMessage(
      `fxls: could not start the language server with "${server.command}" (${String(error)}). ` +
        "Set fxls.python to an interpreter where fxls and torch are installed.",
      openSettings,
      showOutput,
    );
    if (choice === openSettings) {
      await vscode.commands.executeCommand("workbench.action.openSettings", "fxls.python");
    } else if (choice === showOutput) {
      await vscode.commands.executeCommand(COMMAND_SHOW_OUTPUT);
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
