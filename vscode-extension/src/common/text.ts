/**
 * Text for a notification (`showInformationMessage` and its siblings).
 *
 * VS Code renders `[label](https:…)`, `[label](command:…)` and `[label](file:…)` in a
 * notification as a link, and only that pattern: the label's closing bracket directly followed
 * by the opening parenthesis. Text the extension did not write itself (what the server
 * answers, what an interpreter prints, a path) has that pattern broken up, so it can never
 * become a link or run a command. Control characters (C0, DEL, C1) would break lines or
 * reach the terminal-like log, and bidirectional controls (U+061C, U+200E/F, U+202A-U+202E,
 * U+2066-U+2069) would reorder what is shown: each becomes a space. The text is clipped first,
 * so at most `limit` characters are shown.
 *
 * No `vscode` import here: tests run this module under plain Node.
 */

// eslint-disable-next-line no-control-regex -- control characters are what it matches, to replace them
const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** `text` made inert for a notification: no link can form, no control character is left. */
export function notificationText(text: string, limit = 400): string {
  const clipped = text.length > limit ? text.slice(0, limit - 1) + "…" : text;
  return clipped.replace(/\]\s*\(/g, "] (").replace(CONTROLS, " ");
}
