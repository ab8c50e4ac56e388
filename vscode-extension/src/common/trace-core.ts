/**
 * The pure part of "fxls: Trace Class at Cursor": the server's answer to the
 * `workspace/executeCommand` `fxls.traceClass` and how the extension words it.
 *
 * The server answers in plain text (clipped, no control characters). VS Code renders
 * `[label](target)` in a notification as a link, so the text shown there goes through
 * ./text.ts: a string from user code can never become a link or a command.
 *
 * No `vscode` import here: tests run this module under plain Node.
 */
import { notificationText } from "./text";

/** The server-side command (advertised in `executeCommandProvider`). */
export const TRACE_SERVER_COMMAND = "fxls.traceClass";

export interface TraceDiagnostic {
  code: string;
  severity: string;
  message: string;
  /** 0-based line on the current text, or null when that line was edited since. */
  line: number | null;
}

export interface TraceAnswer {
  /** The class's status (`traced`, `partial`, `failed`, `skipped`) or why there is none
   * (`noClass`, `untrusted`, `notOpen`, `syntaxError`, `notCaptured`, `error`). */
  kind: string;
  message: string;
  className?: string;
  line?: number | null;
  version?: number | null;
  status?: string;
  strategy?: string;
  summary?: string;
  details?: string[];
  assumed?: string[];
  pin?: string | null;
  diagnostics?: TraceDiagnostic[];
  graph?: boolean;
}

const CAPTURED = new Set(["traced", "partial", "failed", "skipped"]);

/** Whether the answer reports a captured class (else it says why there is none). */
export function isCaptured(answer: TraceAnswer): boolean {
  return CAPTURED.has(answer.kind) && typeof answer.className === "string";
}

/** `answer` as a TraceAnswer, or undefined when it is not shaped like one. */
export function asTraceAnswer(value: unknown): TraceAnswer | undefined {
  const a = value as TraceAnswer;
  if (typeof a !== "object" || a === null || typeof a.kind !== "string" || typeof a.message !== "string") {
    return undefined;
  }
  return a;
}

/** How loud the notification is: a warning when the class did not trace cleanly. */
export function severityOf(answer: TraceAnswer): "info" | "warning" {
  if (!isCaptured(answer)) {
    return answer.kind === "noClass" ? "info" : "warning";
  }
  const errors = (answer.diagnostics ?? []).some((d) => d.severity === "error");
  return answer.kind === "traced" && !errors ? "info" : "warning";
}

/** The notification: the one-line summary, then what fxls assumed and the first error. */
export function traceMessage(answer: TraceAnswer): string {
  if (!isCaptured(answer)) {
    return notificationText(answer.message);
  }
  let text = `fxls: ${answer.summary ?? answer.message}`;
  const firstError = (answer.diagnostics ?? []).find((d) => d.severity === "error");
  if (firstError && !text.includes(firstError.code)) {
    text += ` · ${firstError.code} ${firstError.message}`;
  }
  return notificationText(text);
}

/** The lines written to the fxls log: the class summary, assumptions, diagnostics. */
export function traceLog(answer: TraceAnswer): string[] {
  if (!isCaptured(answer)) {
    return [`Trace: ${answer.message}`];
  }
  const out = [`Trace of ${answer.className} (document version ${answer.version ?? "?"}):`];
  out.push(...(answer.details ?? []).map((line) => `  ${line}`));
  if (answer.assumed && answer.assumed.length > 0) {
    out.push(`  assumed: ${answer.assumed.join(", ")}`);
  }
  if (answer.pin) {
    out.push(`  pin them with: ${answer.pin}`);
  }
  for (const d of answer.diagnostics ?? []) {
    const where = d.line === null ? "edited line" : `line ${d.line + 1}`;
    out.push(`  ${where}: ${d.severity} ${d.code} ${d.message}`);
  }
  return out;
}
