/**
 * A stand-in for the `vscode` module, for tests that run the extension's activation and server
 * start under plain Node: the parts of the API the extension uses, backed by `fake`, which a
 * test sets (trust, folders, settings, the Python extension) and reads (messages, status).
 *
 * scripts/test.mjs resolves `vscode` to this file.
 */
import * as path from "path";

type Listener<T> = (value: T) => unknown;

export class Disposable {
  constructor(private readonly onDispose: () => void) {}

  dispose(): void {
    this.onDispose();
  }
}

export class EventEmitter<T> {
  private listeners: Listener<T>[] = [];

  readonly event = (listener: Listener<T>): Disposable => {
    this.listeners.push(listener);
    return new Disposable(() => {
      this.listeners = this.listeners.filter((l) => l !== listener);
    });
  };

  fire(value: T): void {
    for (const listener of [...this.listeners]) {
      listener(value);
    }
  }
}

export class Uri {
  private constructor(
    readonly scheme: string,
    readonly fsPath: string,
  ) {}

  static file(fsPath: string): Uri {
    return new Uri("file", fsPath);
  }

  toString(): string {
    return `${this.scheme}://${this.fsPath}`;
  }
}

export class ThemeColor {
  constructor(readonly id: string) {}
}

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
}

export class Range {
  constructor(
    readonly start: Position,
    readonly end: Position,
  ) {}
}

export class CodeLens {
  constructor(
    readonly range: Range,
    readonly command?: unknown,
  ) {}
}

export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}

export enum ProgressLocation {
  SourceControl = 1,
  Window = 10,
  Notification = 15,
}

export enum ViewColumn {
  Active = -1,
  Beside = -2,
  One = 1,
}

export enum TextEditorRevealType {
  Default = 0,
  InCenter = 1,
}

/** The Python extension's environments API, answering `selected` for every resource. */
export function pythonExtension(selected: string): { asked: number; extension: unknown } {
  const changed = new EventEmitter<unknown>();
  const record = {
    asked: 0,
    extension: {
      isActive: true,
      exports: {
        environments: {
          getActiveEnvironmentPath: () => {
            record.asked += 1;
            return { id: selected, path: selected };
          },
          // eslint-disable-next-line @typescript-eslint/require-await -- async like the Python extension's API
          resolveEnvironment: async () => ({ executable: { uri: Uri.file(selected) } }),
          onDidChangeActiveEnvironmentPath: changed.event,
        },
      },
    },
  };
  return record;
}

interface StatusItem {
  text: string;
  tooltip: string | undefined;
  name?: string;
  command?: string;
  backgroundColor?: ThemeColor;
  show(): void;
  dispose(): void;
}

/** What a test controls and observes. */
export const fake = {
  trusted: false,
  folders: [] as string[],
  /** `fxls.<key>` in the user's settings (`inspect().globalValue`). */
  user: {} as Record<string, unknown>,
  /** `fxls.<key>` in the workspace's `.vscode/settings.json` (`inspect().workspaceValue`). */
  workspaceSettings: {} as Record<string, unknown>,
  /** `vscode.extensions.getExtension("ms-python.python")`. */
  pythonExtension: undefined as unknown,
  messages: [] as string[],
  log: [] as string[],
  status: undefined as StatusItem | undefined,
  trustGranted: new EventEmitter<void>(),
  configurationChanged: new EventEmitter<{ affectsConfiguration(section: string): boolean }>(),

  reset(): void {
    this.trusted = false;
    this.folders = [];
    this.user = {};
    this.workspaceSettings = {};
    this.pythonExtension = undefined;
    this.messages = [];
    this.log = [];
    this.status = undefined;
  },
};

function folderOf(fsPath: string): { uri: Uri; name: string; index: number } {
  return { uri: Uri.file(fsPath), name: path.basename(fsPath), index: fake.folders.indexOf(fsPath) };
}

export const workspace = {
  get isTrusted(): boolean {
    return fake.trusted;
  },
  get workspaceFolders(): { uri: Uri; name: string; index: number }[] | undefined {
    return fake.folders.length > 0 ? fake.folders.map(folderOf) : undefined;
  },
  getWorkspaceFolder(uri: Uri): { uri: Uri; name: string; index: number } | undefined {
    const folder = fake.folders.find((f) => uri.fsPath === f || uri.fsPath.startsWith(f + path.sep));
    return folder === undefined ? undefined : folderOf(folder);
  },
  getConfiguration(section: string) {
    const value = (key: string): unknown => fake.workspaceSettings[key] ?? fake.user[key];
    return {
      get: <T>(key: string, fallback: T): T => (value(key) as T | undefined) ?? fallback,
      inspect: <T>(key: string) => ({
        key: `${section}.${key}`,
        globalValue: fake.user[key] as T | undefined,
        workspaceValue: fake.workspaceSettings[key] as T | undefined,
      }),
    };
  },
  onDidChangeConfiguration: fake.configurationChanged.event,
  onDidGrantWorkspaceTrust: fake.trustGranted.event,
};

function record(kind: string) {
  // eslint-disable-next-line @typescript-eslint/require-await -- async like vscode.window.show*Message
  return async (message: string, ..._items: string[]): Promise<string | undefined> => {
    fake.messages.push(`${kind}: ${message}`);
    return undefined;
  };
}

export const window = {
  createOutputChannel: (_name: string, _options?: unknown) => {
    const line = (level: string) => (message: string) => void fake.log.push(`[${level}] ${message}`);
    return {
      info: line("info"),
      warn: line("warn"),
      error: line("error"),
      debug: line("debug"),
      trace: line("trace"),
      appendLine: line("line"),
      append: line("text"),
      show: () => undefined,
      dispose: () => undefined,
    };
  },
  createStatusBarItem: (_id: string, _alignment: StatusBarAlignment, _priority: number): StatusItem => {
    const item: StatusItem = { text: "", tooltip: undefined, show: () => undefined, dispose: () => undefined };
    fake.status = item;
    return item;
  },
  showErrorMessage: record("error"),
  showWarningMessage: record("warning"),
  showInformationMessage: record("info"),
};

export const commands = {
  registerCommand: (_id: string, _run: (...args: unknown[]) => unknown) => new Disposable(() => undefined),
  // eslint-disable-next-line @typescript-eslint/require-await -- async like vscode.commands.executeCommand
  executeCommand: async (_id: string, ..._args: unknown[]): Promise<undefined> => undefined,
};

// eslint-disable-next-line @typescript-eslint/require-await -- async like vscode.env.clipboard.writeText
export const env = { clipboard: { writeText: async (_text: string): Promise<void> => undefined } };

export const extensions = {
  getExtension: (id: string): unknown => (id === "ms-python.python" ? fake.pythonExtension : undefined),
};
