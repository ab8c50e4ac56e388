/**
 * What the interpreter has (Python version, torch, an installed fxls), asked before the server
 * starts, and the message a user gets when something is missing.
 *
 * The probe reads package metadata only (`importlib.metadata`), it imports neither torch nor
 * fxls, so it takes tens of milliseconds. It runs in the same safe launch form as the server
 * (the extension's folder, `PYTHONSAFEPATH=1`) but without the bundled libraries, so it sees
 * the interpreter's own fxls.
 *
 * No `vscode` import here: tests run this module under plain Node.
 */
import { compareVersions } from "./launch";

export const MIN_PYTHON = "3.10";
/** The oldest torch fxls supports (pyproject's `torch>=2.4` extra). */
export const MIN_TORCH = "2.4";

export const PROBE_CODE = [
  "import json, sys",
  "from importlib import metadata",
  "def v(name):",
  "    try:",
  "        return metadata.version(name)",
  "    except Exception:",
  "        return None",
  "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'executable': sys.executable,",
  "                  'torch': v('torch'), 'fxls': v('fxls')}))",
].join("\n");

export interface ProbeInfo {
  python: string;
  executable: string;
  torch: string | null;
  fxls: string | null;
}

/** How running the probe went: the spawn error code, the exit code and the output. */
export interface ProbeRun {
  /** `ENOENT`, `EACCES`, ... when the interpreter could not be started at all. */
  spawnError?: string;
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

export type ProblemKind = "no-python" | "not-python" | "python-too-old" | "no-torch" | "torch-too-old";

export type Action = "openSetting" | "showLog" | "copyCommand";

export interface Problem {
  kind: ProblemKind;
  /** Errors stop the start; a warning is shown and the server starts anyway. */
  severity: "error" | "warning";
  message: string;
  /** A command the user can run to fix it (copied by the "Copy Command" button). */
  command?: string;
  actions: Action[];
}

export type Classified = { ok: true; info: ProbeInfo; problem?: Problem } | { ok: false; problem: Problem };

/** Quotes `arg` for a POSIX shell when it needs it. */
export function shellQuote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

function parseInfo(stdout: string): ProbeInfo | undefined {
  const line = stdout.trim().split(/\r?\n/).pop() ?? "";
  try {
    const data = JSON.parse(line) as Partial<ProbeInfo>;
    if (typeof data.python === "string") {
      return {
        python: data.python,
        executable: typeof data.executable === "string" ? data.executable : "",
        torch: typeof data.torch === "string" ? data.torch : null,
        fxls: typeof data.fxls === "string" ? data.fxls : null,
      };
    }
  } catch {
    // not the probe's JSON: not a Python that ran it
  }
  return undefined;
}

/**
 * The probe's outcome for `interpreter` (as configured), `source` saying where it came from
 * ("the fxls.python setting", ...).
 */
export function classifyProbe(run: ProbeRun, interpreter: string, source: string): Classified {
  const where = `"${interpreter}" (${source})`;
  if (run.spawnError) {
    const reason = run.spawnError === "ENOENT" ? "was not found" : `could not be run (${run.spawnError})`;
    return {
      ok: false,
      problem: {
        kind: "no-python",
        severity: "error",
        message:
          `fxls: no Python interpreter: ${where} ${reason}. ` +
          "Install Python 3.10 or newer with torch, or set fxls.python to its path.",
        actions: ["openSetting", "showLog"],
      },
    };
  }
  const info = run.exitCode === 0 ? parseInfo(run.stdout) : undefined;
  if (!info) {
    const detail = run.stderr.trim().split(/\r?\n/).slice(-1)[0] ?? "";
    return {
      ok: false,
      problem: {
        kind: "not-python",
        severity: "error",
        message:
          `fxls: ${where} did not run as Python 3 (exit ${run.exitCode}${detail ? `: ${detail}` : ""}). ` +
          "Set fxls.python to a Python 3.10+ interpreter with torch.",
        actions: ["openSetting", "showLog"],
      },
    };
  }
  if (compareVersions(info.python, MIN_PYTHON) < 0) {
    return {
      ok: false,
      problem: {
        kind: "python-too-old",
        severity: "error",
        message: `fxls: ${where} is Python ${info.python}; fxls needs Python ${MIN_PYTHON} or newer. Set fxls.python to a newer interpreter.`,
        actions: ["openSetting", "showLog"],
      },
    };
  }
  const python = shellQuote(info.executable || interpreter);
  if (!info.torch) {
    const command = `${python} -m pip install torch`;
    return {
      ok: false,
      problem: {
        kind: "no-torch",
        severity: "error",
        message:
          `fxls: PyTorch is not installed in ${where}. Install it with: ${command} ` +
          "(or set fxls.python to an environment that has torch).",
        command,
        actions: ["copyCommand", "openSetting", "showLog"],
      },
    };
  }
  if (compareVersions(info.torch, MIN_TORCH) < 0) {
    const command = `${python} -m pip install --upgrade 'torch>=${MIN_TORCH}'`;
    return {
      ok: true,
      info,
      problem: {
        kind: "torch-too-old",
        severity: "warning",
        message:
          `fxls: torch ${info.torch} in ${where} is older than ${MIN_TORCH}; shapes may be missing or wrong. ` +
          `Upgrade it with: ${command}`,
        command,
        actions: ["copyCommand", "openSetting", "showLog"],
      },
    };
  }
  return { ok: true, info };
}
