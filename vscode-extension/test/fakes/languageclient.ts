/**
 * A stand-in for `vscode-languageclient/node`: `LanguageClient.start()` spawns the server
 * command as the real client does for stdio (`child_process.spawn(command, args, options)`),
 * waits for it to exit and records it in `started`, so a test sees every server process the
 * extension starts. The fake server programs of the tests exit at once.
 *
 * scripts/test.mjs resolves `vscode-languageclient/node` to this file.
 */
import { spawn } from "child_process";

export enum State {
  Stopped = 1,
  Running = 2,
  Starting = 3,
}

export enum TransportKind {
  stdio = 0,
}

export enum RevealOutputChannelOn {
  Never = 4,
}

export const ExecuteCommandRequest = { type: { method: "workspace/executeCommand" } };

interface Executable {
  command: string;
  args: string[];
  options: { cwd: string; env: Record<string, string> };
}

/** One server start: the command line and what the client sent in `initialize`. */
export interface Started {
  command: string;
  args: string[];
  initializationOptions: unknown;
  exitCode: number | null;
}

export const started: Started[] = [];

export class LanguageClient {
  private listeners: ((event: { oldState: State; newState: State }) => void)[] = [];
  private state = State.Stopped;

  constructor(
    readonly id: string,
    readonly name: string,
    private readonly serverOptions: Executable,
    private readonly clientOptions: { initializationOptions?: unknown },
  ) {}

  onDidChangeState(listener: (event: { oldState: State; newState: State }) => void): { dispose(): void } {
    this.listeners.push(listener);
    return { dispose: () => undefined };
  }

  private setState(newState: State): void {
    const oldState = this.state;
    this.state = newState;
    for (const listener of this.listeners) {
      listener({ oldState, newState });
    }
  }

  async start(): Promise<void> {
    this.setState(State.Starting);
    const { command, args, options } = this.serverOptions;
    const exitCode = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: "ignore" });
      child.on("error", reject);
      child.on("exit", (code) => resolve(code));
    });
    started.push({ command, args, initializationOptions: this.clientOptions.initializationOptions, exitCode });
    this.setState(State.Running);
  }

  isRunning(): boolean {
    return this.state === State.Running;
  }

  // eslint-disable-next-line @typescript-eslint/require-await -- async like the real client's dispose
  async dispose(_timeout?: number): Promise<void> {
    this.setState(State.Stopped);
  }
}
