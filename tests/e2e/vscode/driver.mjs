// Drives a real VS Code (code-server) in headless Chromium with playwright-core.
//
// Usage: node driver.mjs <config.json>
// The config names the served URL, the Chromium binary, a fresh profile dir, a screenshot dir,
// where playwright-core is installed, and a list of steps (see test_vscode.py). The driver
// prints one JSON object on stdout: what each step observed, so the Python test asserts on it.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const require = createRequire(path.join(config.nodeModules, "noop.js"));
const { chromium } = require("playwright-core");

const results = { steps: [], console: [], error: null };
const log = (message) => process.stderr.write(`driver: ${message}\n`);

async function screenshot(page, name) {
  const file = path.join(config.screenshotDir, `${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

/** Opens a workspace file through Quick Open and waits until its text is rendered. */
async function openFile(page, name, expectText) {
  await page
    .locator(".monaco-workbench")
    .click({ position: { x: 600, y: 400 } })
    .catch(() => {});
  await page.keyboard.press("Control+P");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: 15000 });
  await input.fill(name);
  // Wait until Quick Open lists the file (file search starts a moment after the workbench).
  const row = page
    .locator(".quick-input-list .monaco-list-row", { hasText: name })
    .first();
  await row.waitFor({ state: "visible", timeout: 20000 });
  await page.waitForTimeout(200);
  await page.keyboard.press("Enter");
  await page.waitForFunction(
    (text) => {
      // every rendered editor: a notebook shows one per cell
      const editors = document.querySelectorAll(
        ".editor-instance .view-lines, .monaco-editor .view-lines",
      );
      return Array.from(editors).some((lines) =>
        lines.textContent.replace(/\u00a0/g, " ").includes(text),
      );
    },
    expectText,
    { timeout: 20000 },
  );
}

/** Scrolls the editor to a line (Go to Line, Ctrl+G) and waits until `expectText` is rendered. */
async function goToLine(page, line, expectText, timeoutMs) {
  await page.keyboard.press("Control+G");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: 15000 });
  await input.fill(`:${line}`);
  await page.waitForTimeout(200);
  await page.keyboard.press("Enter");
  await page.waitForFunction(
    (text) =>
      Array.from(document.querySelectorAll(".monaco-editor .view-lines")).some(
        (lines) => lines.textContent.replace(/\u00a0/g, " ").includes(text),
      ),
    expectText,
    { timeout: timeoutMs },
  );
}

/** Screen coordinates of `word` inside the first rendered editor line containing `lineText`. */
async function locateWord(page, lineText, word) {
  return page.evaluate(
    ({ lineText, word }) => {
      for (const line of document.querySelectorAll(
        ".monaco-editor .view-line",
      )) {
        const text = line.textContent.replace(/\u00a0/g, " ");
        const at = text.indexOf(lineText);
        if (at < 0) continue;
        const wordAt = at + lineText.indexOf(word);
        // Walk the text nodes to the character offset (Monaco splits a line into token spans).
        const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
        let offset = 0;
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          const length = node.textContent.length;
          if (wordAt < offset + length) {
            const range = document.createRange();
            const start = wordAt - offset;
            range.setStart(node, start);
            range.setEnd(
              node,
              Math.min(
                length,
                start + Math.max(1, Math.floor(word.length / 2)),
              ),
            );
            const rect = range.getBoundingClientRect();
            return { x: rect.right, y: rect.top + rect.height / 2 };
          }
          offset += length;
        }
      }
      return null;
    },
    { lineText, word },
  );
}

/** The text of the visible hover widgets ("" when none is shown or it is still loading). */
async function hoverText(page) {
  return page.evaluate(() => {
    const shown = Array.from(
      document.querySelectorAll(".monaco-hover:not(.hidden)"),
    );
    const text = shown
      .map((h) => h.innerText.trim())
      .filter((t) => t.length > 0)
      .join("\n");
    return /^Loading\.*$/.test(text) ? "" : text;
  });
}

/**
 * Hovers the point `locate()` returns until the hover widget's text contains every string of
 * `expect`, as a user waits for it: move away, move onto the target, poll the widget's text for
 * a few seconds, and again, until `timeoutMs`. Throws with the last text seen on timeout.
 */
async function hoverUntil(page, what, locate, expect, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  let text = "";
  let attempts = 0;
  while (Date.now() < deadline) {
    attempts++;
    const point = await locate();
    if (!point) throw new Error(`hover ${what}: the target is not on screen`);
    await page.mouse.move(5, 5);
    await page.waitForTimeout(200);
    await page.mouse.move(point.x, point.y, { steps: 3 });
    const pollUntil = Math.min(deadline, Date.now() + 5000);
    while (Date.now() < pollUntil) {
      await page.waitForTimeout(150);
      text = await hoverText(page);
      if (text && expect.every((e) => text.includes(e))) {
        await page.waitForTimeout(300); // let it finish fading in for the screenshot
        return (await hoverText(page)) || text;
      }
    }
    await page.waitForTimeout(500);
  }
  throw new Error(
    `hover ${what}: no hover containing ${JSON.stringify(expect)} within ${Math.round(timeoutMs / 1000)} s ` +
      `(${attempts} attempts); last hover text: ${JSON.stringify(text)}`,
  );
}

/** Puts the cursor on `word`, opens Quick Fix (Ctrl+.), picks the action whose title contains
 * `title`, and waits until the editor no longer shows `gone`. Returns the actions listed and the
 * editor's text after the fix. */
async function quickFix(page, fix, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  const out = { items: [], applied: false };
  while (Date.now() < deadline) {
    const point = await locateWord(page, fix.line, fix.word);
    if (!point)
      throw new Error(`no rendered line contains ${JSON.stringify(fix.line)}`);
    await page.mouse.click(point.x, point.y);
    await page.keyboard.press("Control+.");
    const rows = page.locator(".action-widget .monaco-list-row");
    try {
      await rows.first().waitFor({ state: "visible", timeout: 5000 });
    } catch {
      await page.keyboard.press("Escape");
      await page.waitForTimeout(700);
      continue; // no actions yet: the server may still be analysing
    }
    out.items = await rows.allInnerTexts();
    const wanted = rows.filter({ hasText: fix.title }).first();
    if ((await wanted.count()) === 0) {
      await page.keyboard.press("Escape");
      await page.waitForTimeout(700);
      continue;
    }
    // Choose it with the keyboard (a pointer block over the menu swallows clicks).
    for (let i = 0; i < out.items.length + 2; i++) {
      const focused = await page
        .locator(".action-widget .monaco-list-row.focused")
        .first()
        .innerText()
        .catch(() => "");
      if (focused.includes(fix.title)) break;
      await page.keyboard.press("ArrowDown");
      await page.waitForTimeout(100);
    }
    await page.keyboard.press("Enter");
    try {
      await page.waitForFunction(
        (gone) => {
          const lines = document.querySelector(
            ".editor-instance .view-lines, .monaco-editor .view-lines",
          );
          return (
            lines !== null &&
            !lines.textContent.replace(/\u00a0/g, " ").includes(gone)
          );
        },
        fix.gone,
        { timeout: 30000 },
      );
      out.applied = true;
    } catch {
      out.applied = false;
    }
    break;
  }
  out.text = await page.evaluate(() =>
    Array.from(document.querySelectorAll(".monaco-editor .view-line"))
      .map((line) => ({
        top: parseFloat(line.style.top || "0"),
        text: line.textContent.replace(/\u00a0/g, " "),
      }))
      .sort((a, b) => a.top - b.top)
      .map((line) => line.text)
      .join("\n"),
  );
  return out;
}

async function squiggles(page) {
  return page.evaluate(() => ({
    errors: document.querySelectorAll(".monaco-editor .squiggly-error").length,
    warnings: document.querySelectorAll(".monaco-editor .squiggly-warning")
      .length,
  }));
}

/** The fxls status bar item: its text and the codicons it shows (e.g. codicon-shield). */
async function statusBar(page) {
  return page.evaluate(() => {
    const items = Array.from(
      document.querySelectorAll(".statusbar-item"),
    ).filter((e) => /fxls/.test(e.innerText));
    return {
      text: items.map((e) => e.innerText.trim()).join(" | "),
      icons: items.flatMap((e) =>
        Array.from(e.querySelectorAll(".codicon")).flatMap((i) =>
          Array.from(i.classList).filter((c) => c.startsWith("codicon-")),
        ),
      ),
    };
  });
}

async function notifications(page) {
  return page.evaluate(() =>
    // each toast's message, then its buttons in brackets: "message [Open Setting] [Show Log]"
    Array.from(
      document.querySelectorAll(
        ".notifications-toasts .notification-list-item",
      ),
    )
      .map((item) => {
        const message =
          item
            .querySelector(".notification-list-item-message")
            ?.innerText.trim() ?? "";
        const buttons = Array.from(
          item.querySelectorAll(
            ".notification-list-item-buttons-container .monaco-button",
          ),
        ).map((b) => `[${b.innerText.trim()}]`);
        return [message, ...buttons].join(" ");
      })
      .join("\n"),
  );
}

/** Trusts the open folder through the Workspace Trust editor, as a user would. */
async function grantTrust(page) {
  await page.keyboard.press("Control+Shift+P");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: 15000 });
  await input.fill(">Workspaces: Manage Workspace Trust");
  await page
    .locator(".quick-input-list .monaco-list-row", {
      hasText: "Manage Workspace Trust",
    })
    .first()
    .waitFor({ state: "visible", timeout: 15000 });
  await page.keyboard.press("Enter");
  const button = page
    .locator(".workspace-trust-editor .monaco-button", { hasText: /^Trust/ })
    .first();
  await button.waitFor({ state: "visible", timeout: 15000 });
  await screenshot(page, "trust-editor");
  await button.click();
  await page.waitForTimeout(500);
}

async function runStep(page, step) {
  const out = { name: step.name };
  const started = Date.now();
  if (step.grantTrust) {
    await grantTrust(page);
  }
  await openFile(page, step.file, step.expectText);
  out.opened_ms = Date.now() - started;
  if (step.goToLine) {
    await goToLine(
      page,
      step.goToLine.line,
      step.goToLine.expectText,
      step.timeoutMs ?? 20000,
    );
  }
  if (step.settleMs) {
    await page.waitForTimeout(step.settleMs);
  }
  if (step.waitSquiggle) {
    try {
      await page.waitForSelector(
        `.monaco-editor .squiggly-${step.waitSquiggle}`,
        {
          timeout: step.timeoutMs,
        },
      );
    } catch {
      out.squiggle_timeout = true;
    }
  }
  out.squiggles = await squiggles(page);
  out.diagnostics_ms = Date.now() - started;
  if (step.hover) {
    const { line, word } = step.hover;
    out.hover = await hoverUntil(
      page,
      JSON.stringify(word),
      async () => {
        const point = await locateWord(page, line, word);
        if (!point)
          throw new Error(`no rendered line contains ${JSON.stringify(line)}`);
        return point;
      },
      step.hover.expect ?? [],
      step.timeoutMs,
    );
    out.hover_ms = Date.now() - started;
  }
  if (step.quickFix) {
    out.quick_fix = await quickFix(page, step.quickFix, step.timeoutMs);
  }
  out.status = await statusBar(page);
  out.notifications = await notifications(page);
  out.screenshot = await screenshot(page, step.name);
  if (step.squiggleHover) {
    // Hover the first error squiggle until the diagnostic's message is shown.
    out.squiggle_hover = await hoverUntil(
      page,
      "the error squiggle",
      async () => {
        const box = await page
          .locator(".monaco-editor .squiggly-error")
          .first()
          .boundingBox();
        return (
          box && {
            x: box.x + Math.min(box.width / 2, 20),
            y: box.y + box.height / 2,
          }
        );
      },
      step.squiggleHover === true ? ["fxls"] : step.squiggleHover,
      step.timeoutMs,
    );
    await screenshot(page, `${step.name}-diagnostic`);
  }
  if (step.graph) {
    out.graph = await showGraph(page, step.graph);
  }
  for (const trace of step.traces ?? []) {
    out.traces = out.traces ?? [];
    out.traces.push(await traceClass(page, trace, step.timeoutMs));
  }
  return out;
}

/** The toasts' text, and the one toast (a locator) whose text contains every `expect`. */
async function toastWith(page, expect) {
  const toasts = page.locator(".notifications-toasts .notification-list-item");
  const count = await toasts.count();
  for (let i = 0; i < count; i++) {
    const text = await toasts
      .nth(i)
      .innerText()
      .catch(() => "");
    if (expect.every((e) => text.includes(e))) return toasts.nth(i);
  }
  return null;
}

/**
 * "fxls: Trace Class at Cursor" as a user runs it: optionally edit the file first (select
 * `edit.word` on the line `edit.line`, type `edit.text`), put the cursor on `word` in `line`,
 * run the command from the command palette or the editor's context menu (`via`), watch for the
 * progress notification, wait for the answer's notification to contain every `expect`, and
 * press its `button` ("Show Graph": then wait for the graph to show `graphExpect`).
 */
async function traceClass(page, trace, timeoutMs) {
  const out = { via: trace.via };
  await runCommand(page, "Notifications: Clear All Notifications");
  await page.waitForTimeout(300);
  if (trace.edit) {
    const at = await locateWord(page, trace.edit.line, trace.edit.word);
    if (!at)
      throw new Error(
        `trace: no rendered line contains ${JSON.stringify(trace.edit.line)}`,
      );
    await page.mouse.dblclick(at.x, at.y);
    await page.keyboard.type(trace.edit.text);
    await page.waitForFunction(
      (text) =>
        document
          .querySelector(
            ".editor-instance .view-lines, .monaco-editor .view-lines",
          )
          ?.textContent.replace(/\u00a0/g, " ")
          .includes(text),
      trace.edit.expectText,
      { timeout: 10000 },
    );
  }
  const point = await locateWord(page, trace.line, trace.word);
  if (!point)
    throw new Error(
      `trace: no rendered line contains ${JSON.stringify(trace.line)}`,
    );
  await page.mouse.click(point.x, point.y);
  const started = Date.now();
  if (trace.via === "context menu") {
    await page.mouse.click(point.x, point.y, { button: "right" });
    const item = page
      .locator(".monaco-menu .action-item", {
        hasText: "Trace Class at Cursor",
      })
      .first();
    await item.waitFor({ state: "visible", timeout: 15000 });
    out.menu = (await page.locator(".monaco-menu .action-item").allInnerTexts())
      .map((t) => t.trim())
      .filter(Boolean);
    await screenshot(page, `trace-menu`);
    await item.click();
  } else {
    await runCommand(page, "fxls: Trace Class at Cursor");
  }
  out.progress = "";
  let toast = null;
  while (Date.now() - started < timeoutMs) {
    const shown = await notifications(page);
    if (!out.progress && shown.includes("tracing the class at the cursor"))
      out.progress = shown;
    toast = await toastWith(page, trace.expect);
    if (toast) break;
    await page.waitForTimeout(50);
  }
  if (!toast) {
    throw new Error(
      `trace: no notification containing ${JSON.stringify(trace.expect)} within ${Math.round(timeoutMs / 1000)} s; ` +
        `notifications: ${JSON.stringify(await notifications(page))}`,
    );
  }
  out.ms = Date.now() - started;
  await page.waitForTimeout(300);
  out.notification = await notifications(page);
  out.screenshot = await screenshot(page, trace.name ?? "trace");
  if (trace.button) {
    await toast
      .locator(".monaco-button", { hasText: trace.button })
      .first()
      .click();
    if (trace.button === "Show Graph") {
      const deadline = Date.now() + timeoutMs;
      out.graph_nodes = [];
      while (
        Date.now() < deadline &&
        !out.graph_nodes.some((n) => n.includes(trace.graphExpect))
      ) {
        const frame = await frameWith(
          page,
          "#fxls-svg [data-node]",
          Math.max(1000, deadline - Date.now()),
        );
        try {
          out.graph_nodes = await frame.evaluate(() =>
            Array.from(document.querySelectorAll("#fxls-svg [data-node]")).map(
              (g) => g.textContent,
            ),
          );
        } catch {
          // the view is loading the new page: this frame went away, look again
        }
        await page.waitForTimeout(250);
      }
      await page.waitForTimeout(300);
      await screenshot(page, `${trace.name ?? "trace"}-graph`);
    }
  }
  return out;
}

/** Runs a command from the command palette by its title ("fxls: Show Log"). */
async function runCommand(page, title) {
  await page.keyboard.press("Control+Shift+P");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: 15000 });
  await input.fill(">" + title);
  await page
    .locator(".quick-input-list .monaco-list-row", { hasText: title })
    .first()
    .waitFor({ state: "visible", timeout: 15000 });
  await page.keyboard.press("Enter");
}

/** The frame (inside the webview's iframes) whose document matches `selector`. */
async function frameWith(page, selector, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    for (const frame of page.frames()) {
      try {
        if (
          await frame.evaluate(
            (s) => document.querySelector(s) !== null,
            selector,
          )
        )
          return frame;
      } catch {
        // a frame that is navigating or gone
      }
    }
    await page.waitForTimeout(250);
  }
  throw new Error(
    `no webview frame with ${selector} within ${Math.round(timeoutMs / 1000)} s`,
  );
}

/**
 * Opens the graph through the "Show graph" code lens (or the command), waits for the webview to
 * draw nodes, takes a screenshot, clicks the node labelled `graph.click` and reads the editor's
 * cursor position from the status bar (the extension reveals the node's source line).
 */
async function showGraph(page, graph) {
  const out = {};
  const lens = page
    .locator(".monaco-editor .codelens-decoration a", { hasText: "Show graph" })
    .first();
  try {
    await lens.waitFor({ state: "visible", timeout: graph.timeoutMs ?? 30000 });
    await lens.click();
    out.opened_by = "code lens";
  } catch {
    await runCommand(page, "fxls: Show Graph");
    out.opened_by = "command";
  }
  const frame = await frameWith(
    page,
    "#fxls-svg [data-node]",
    graph.timeoutMs ?? 30000,
  );
  out.nodes = await frame.evaluate(() =>
    Array.from(document.querySelectorAll("#fxls-svg [data-node]")).map(
      (g) => g.textContent,
    ),
  );
  out.title = await frame.evaluate(
    () => document.querySelector("header h1")?.textContent ?? "",
  );
  await page.waitForTimeout(300);
  out.screenshot = await screenshot(page, "graph");
  const node = frame
    .locator("#fxls-svg [data-node]", { hasText: graph.click })
    .first();
  await node.click();
  const deadline = Date.now() + 15000;
  out.selection = "";
  while (Date.now() < deadline) {
    out.selection = await page.evaluate(
      () =>
        document.getElementById("status.editor.selection")?.innerText.trim() ??
        "",
    );
    if (out.selection.startsWith(`Ln ${graph.expectLine},`)) break;
    await page.waitForTimeout(200);
  }
  out.details = await frame.evaluate(
    () => document.getElementById("fxls-details")?.innerText ?? "",
  );
  await screenshot(page, "graph-revealed");
  return out;
}

/** Runs "fxls: Show Log" from the command palette and returns the panel's visible text. */
async function showOutput(page) {
  await runCommand(page, "fxls: Show Log");
  await page.waitForTimeout(300);
  await page.waitForSelector(".part.panel .monaco-editor .view-lines", {
    timeout: 15000,
  });
  await page.waitForTimeout(800);
  const text = await page.evaluate(
    () =>
      document.querySelector(".part.panel .monaco-editor .view-lines")
        ?.innerText ?? "",
  );
  await screenshot(page, "output");
  return text.replace(/\u00a0/g, " ");
}

async function main() {
  const context = await chromium.launchPersistentContext(config.profileDir, {
    executablePath: config.chromium,
    headless: true,
    viewport: { width: 1400, height: 900 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("console", (message) => {
    if (message.type() === "error")
      results.console.push(message.text().slice(0, 300));
  });
  try {
    await page.goto(config.url, {
      waitUntil: "domcontentloaded",
      timeout: 60000,
    });
    await page.waitForSelector(".monaco-workbench", { timeout: 60000 });
    await page.waitForSelector(".statusbar", { timeout: 60000 });
    log("workbench loaded");
    for (const step of config.steps) {
      log(`step ${step.name}`);
      results.steps.push(await runStep(page, step));
    }
    if (config.showOutput) {
      results.output = await showOutput(page);
    }
  } catch (error) {
    results.error = String(error && error.stack ? error.stack : error);
    try {
      results.failure_screenshot = await screenshot(page, "failure");
    } catch {
      // The page is gone; nothing more to record.
    }
  } finally {
    await context.close();
  }
  process.stdout.write(JSON.stringify(results) + "\n");
}

await main();
