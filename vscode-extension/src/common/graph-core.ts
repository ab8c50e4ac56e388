/**
 * The pure part of "fxls: Show graph": which class to draw, and the page the webview shows.
 *
 * The server answers `fxls/graph` with the self-contained HTML page of `fxls graph` (the graph
 * as JSON, dagre and the viewer, all inline). The webview gets that page with a Content
 * Security Policy that allows only its own inline scripts (each gets a nonce) and no network,
 * plus a small bridge: clicking a node (or its location link) posts `{type: "reveal", line,
 * col}` to the extension, which reveals that line in the editor.
 *
 * No `vscode` import here: tests run this module under plain Node.
 */

const CLASS_LINE = /^\s*class\s+([A-Za-z_]\w*)\s*[(:]/;

/** The class a `class Name(...):` line defines, or undefined. */
export function className(line: string): string | undefined {
  return CLASS_LINE.exec(line)?.[1];
}

/** Every top-level-or-nested class of `lines` with its (0-based) line. */
export function classesIn(lines: string[]): { name: string; line: number }[] {
  const out: { name: string; line: number }[] = [];
  lines.forEach((text, line) => {
    const name = className(text);
    if (name) {
      out.push({ name, line });
    }
  });
  return out;
}

/** The class whose body holds (0-based) `line`: the nearest `class` line at or above it. */
export function classAt(lines: string[], line: number): string | undefined {
  for (let i = Math.min(line, lines.length - 1); i >= 0; i--) {
    const name = className(lines[i]);
    if (name) {
      return name;
    }
  }
  return undefined;
}

/** A message from the graph view. */
export interface RevealMessage {
  type: "reveal";
  /** 1-based line, 0-based column (as in the graph's JSON). */
  line: number;
  col: number;
}

export function isRevealMessage(value: unknown): value is RevealMessage {
  const m = value as RevealMessage;
  return (
    typeof m === "object" &&
    m !== null &&
    m.type === "reveal" &&
    Number.isInteger(m.line) &&
    m.line >= 1 &&
    Number.isInteger(m.col) &&
    m.col >= 0
  );
}

/** Runs in the webview: node clicks become "reveal" messages to the extension. */
const BRIDGE = `
(function () {
  const vscode = acquireVsCodeApi();
  function reveal(node) {
    if (node && node.line !== null && node.line !== undefined) {
      vscode.postMessage({ type: "reveal", line: node.line, col: node.col || 0 });
    }
  }
  document.addEventListener("click", function (event) {
    const target = event.target instanceof Element ? event.target : null;
    if (!target || !window.fxlsGraph) return;
    const link = target.closest(".fxls-location a");
    if (link) {
      event.preventDefault();
      const id = decodeURIComponent((location.hash.match(/node=([^&]+)/) || [])[1] || "");
      reveal(window.fxlsGraph.data.nodes.find(function (n) { return n.id === id; }));
      return;
    }
    const group = target.closest("[data-node]");
    if (group) {
      const id = group.getAttribute("data-node");
      reveal(window.fxlsGraph.data.nodes.find(function (n) { return n.id === id; }));
    }
  }, true);
})();
`;

/**
 * `html` (a page from `fxls graph`) made ready for a webview: a CSP allowing only scripts with
 * `nonce` and inline styles, the nonce on every script, and the bridge script.
 */
export function webviewHtml(html: string, nonce: string, cspSource: string): string {
  const csp =
    `default-src 'none'; img-src ${cspSource} data:; style-src ${cspSource} 'unsafe-inline'; ` +
    `script-src 'nonce-${nonce}';`;
  const meta = `<meta http-equiv="Content-Security-Policy" content="${csp}">`;
  let out = html.replace(/<script(?=[\s>])/g, `<script nonce="${nonce}"`);
  out = /<head[^>]*>/.test(out) ? out.replace(/<head[^>]*>/, (head) => `${head}\n${meta}`) : meta + out;
  const bridge = `<script nonce="${nonce}">${BRIDGE}</script>`;
  return out.includes("</body>")
    ? out.replace(/<\/body>(?![\s\S]*<\/body>)/, () => `${bridge}\n</body>`)
    : out + bridge;
}
