/** Identifiers shared by the extension's modules and package.json. */

export const EXTENSION_NAME = "fxls";
/** Configuration section; also the language client's id, so `fxls.trace.server` works. */
export const CONFIG_SECTION = "fxls";
export const COMMAND_RESTART = "fxls.restartServer";
export const COMMAND_SHOW_LOG = "fxls.showLog";
/** The old name of fxls.showLog, still registered (hidden from the palette). */
export const COMMAND_SHOW_OUTPUT = "fxls.showOutput";
export const COMMAND_SHOW_GRAPH = "fxls.showGraph";
export const COMMAND_TRACE = "fxls.traceClassAtCursor";
export const PYTHON_EXTENSION_ID = "ms-python.python";
/**
 * Settings that change how the server process is started, or that the server reads only at
 * start (the sandbox settings, see settings.ts); a change restarts it.
 */
export const RESTART_SETTINGS = ["fxls.python", "fxls.server.command", "fxls.limits", "fxls.isolation"] as const;
