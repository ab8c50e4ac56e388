-- fxls for Neovim 0.11+, in the format of vim.lsp.config() (nvim-lspconfig ships its
-- configurations the same way, as lsp/<name>.lua).
--
-- Install: copy this file to ~/.config/nvim/lsp/fxls.lua (any `lsp/` folder on 'runtimepath'
-- works), and lua/fxls/health.lua next to it for `:checkhealth fxls`; then in init.lua:
--
--   vim.lsp.enable("fxls")
--
-- `fxls` must be on PATH, or set, before the first Python buffer opens:
--   vim.g.fxls_cmd = { "/path/to/python", "-P", "-m", "fxls", "serve" }   -- -P: Python 3.11+
--   vim.g.fxls_settings = { debounceMs = 500 }      -- merged into the settings below
-- or override any field with vim.lsp.config("fxls", { ... }).
--
-- Attached, it turns on inlay hints and code lenses and adds the buffer commands
-- :FxlsTrace (capture now and show the class at the cursor), :FxlsGraph (its graph in a
-- browser) and :FxlsFixAll.

-- Settings sent to the server (workspace/configuration, section "fxls"). Every key is
-- optional; docs/configuration.md lists them with their defaults.
local settings = {
  fxls = {
    debounceMs = 300,
    inlayHints = { enabled = true },
    codeLens = { enabled = true },
    capture = { metaInit = true, symbolic = true },
  },
}
if vim.g.fxls_settings then
  settings.fxls = vim.tbl_deep_extend("force", settings.fxls, vim.g.fxls_settings)
end

-- The sandbox settings go in init_options: the server reads them once, at start, and ignores
-- them in workspace/configuration answers (a project-local config could set those).
local init_options = {
  -- fxls executes the files you open (in a sandbox). Set trusted = false to turn that off.
  trusted = true,
  python = "", -- interpreter with torch for the worker; "" = the server's own
  limits = { timeoutSeconds = 10, cpuSeconds = 12, memoryMB = 2048, fileSizeMB = 64 },
  isolation = { seccomp = true, landlock = true },
}

-- Start the server outside the project: `python -m` puts its working directory first on
-- sys.path, so a project's own logging.py or fxls/ would run inside the server. A directory
-- of Neovim's own, and PYTHONSAFEPATH (Python 3.11+), keep the project off sys.path.
local server_cwd = vim.fn.stdpath("cache") .. "/fxls"
vim.fn.mkdir(server_cwd, "p")

local TRACE_COMMAND = "fxls.traceClass"

--- The answer of `fxls.traceClass` (see docs/editors/neovim.md) as the lines of a float.
local function trace_lines(answer, path)
  local lines = { answer.summary or answer.message, "" }
  vim.list_extend(lines, answer.details or {})
  if answer.assumed and #answer.assumed > 0 then
    table.insert(lines, "assumed: " .. table.concat(answer.assumed, ", "))
  end
  if answer.pin and answer.pin ~= vim.NIL then
    table.insert(lines, "pin them with: " .. answer.pin)
  end
  for _, d in ipairs(answer.diagnostics or {}) do
    local where = d.line ~= vim.NIL and ("line " .. (d.line + 1)) or "edited line"
    table.insert(lines, ("%s: %s %s %s"):format(where, d.severity, d.code, d.message))
  end
  if answer.graph then
    table.insert(lines, "")
    local target = vim.fn.fnamemodify(path, ":.") .. ":" .. answer.className
    table.insert(lines, ("graph: :FxlsGraph, or fxls graph %s -o %s.html"):format(target, answer.className))
  end
  return lines
end

--- A request to this client only (Neovim 0.10 has client.request, 0.11 client:request).
local function request(client, method, params, handler, buf)
  if vim.fn.has("nvim-0.11") == 1 then
    return client:request(method, params, handler, buf)
  end
  return client.request(method, params, handler, buf)
end

--- :FxlsTrace: capture the buffer now (no debounce) and show the class at the cursor.
local function trace(client, buf)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  vim.notify("fxls: tracing the class at the cursor…", vim.log.levels.INFO)
  request(client, "workspace/executeCommand", {
    command = TRACE_COMMAND,
    arguments = { params },
  }, function(err, answer)
    if err or type(answer) ~= "table" then
      local why = err and err.message or "no answer"
      vim.notify("fxls: the trace failed: " .. why, vim.log.levels.ERROR)
      return
    end
    local captured = answer.className ~= nil and answer.className ~= vim.NIL
    if not captured then
      local level = answer.kind == "noClass" and vim.log.levels.INFO or vim.log.levels.WARN
      vim.notify(answer.message, level)
      return
    end
    local errors = vim.tbl_filter(function(d)
      return d.severity == "error"
    end, answer.diagnostics or {})
    local clean = answer.kind == "traced" and #errors == 0
    vim.notify("fxls: " .. answer.summary, clean and vim.log.levels.INFO or vim.log.levels.WARN)
    local path = vim.api.nvim_buf_get_name(buf)
    vim.lsp.util.open_floating_preview(trace_lines(answer, path), "", {
      border = "rounded",
      focus_id = "fxls-trace",
      max_width = 100,
    })
  end, buf)
end

--- :FxlsGraph: the graph of the class at the cursor (captured now), as an HTML page in
--- stdpath("cache")/fxls/graphs, opened with vim.ui.open (your browser).
local function graph(client, buf)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  request(client, "workspace/executeCommand", {
    command = TRACE_COMMAND,
    arguments = { params },
  }, function(err, answer)
    if err or type(answer) ~= "table" then
      vim.notify("fxls: no graph: " .. (err and err.message or "no answer"), vim.log.levels.ERROR)
      return
    end
    if not answer.graph then
      local captured = answer.className ~= nil and answer.className ~= vim.NIL
      local why = captured and ("fxls: no graph for " .. answer.className) or answer.message
      vim.notify(why, vim.log.levels.WARN)
      return
    end
    local query = { uri = params.textDocument.uri, className = answer.className }
    request(client, "fxls/graph", query, function(err2, page)
      if err2 or type(page) ~= "table" or type(page.html) ~= "string" then
        local why = err2 and err2.message or (type(page) == "table" and page.error) or "no answer"
        vim.notify(("fxls: no graph for %s: %s"):format(answer.className, why), vim.log.levels.WARN)
        return
      end
      local dir = vim.fn.stdpath("cache") .. "/fxls/graphs"
      vim.fn.mkdir(dir, "p")
      local path = dir .. "/" .. answer.className .. ".html" -- a class name is an identifier
      local file = assert(io.open(path, "w"))
      file:write(page.html)
      file:close()
      local opened, open_err = vim.ui.open(path)
      local message = ("fxls: graph of %s (%s nodes): %s"):format(answer.className, page.nodes or "?", path)
      if not opened then
        message = message .. " (open it in a browser: " .. tostring(open_err) .. ")"
      end
      vim.notify(message, vim.log.levels.INFO)
    end, buf)
  end, buf)
end

return {
  cmd = vim.g.fxls_cmd or { "fxls", "serve" },
  cmd_cwd = server_cwd,
  cmd_env = { PYTHONSAFEPATH = "1" },
  filetypes = { "python" },
  root_markers = { "pyproject.toml", "setup.py", "setup.cfg", ".git" },
  init_options = init_options,
  settings = settings,
  on_attach = function(client, buf)
    -- End-of-line shapes: `x = self.conv1(x)  ▸ [B, 64, 112, 112]`
    vim.lsp.inlay_hint.enable(true, { bufnr = buf })
    -- The summary above each class: `fxls · 177 nodes · 25.6 M params · ...`
    vim.lsp.codelens.refresh({ bufnr = buf })
    -- Neovim 0.11 does not advertise workspace/codeLens/refresh, and the refresh above runs
    -- before the first capture has finished. fxls publishes diagnostics after every capture
    -- (an empty list too), so refresh the lenses whenever they change.
    local events = { "BufEnter", "InsertLeave", "BufWritePost", "DiagnosticChanged" }
    vim.api.nvim_create_autocmd(events, {
      group = vim.api.nvim_create_augroup("fxls-codelens-" .. buf, { clear = true }),
      buffer = buf,
      callback = function()
        vim.lsp.codelens.refresh({ bufnr = buf })
      end,
    })
    -- K shows the hover (named arguments and shapes); diagnostics use vim.diagnostic.
    -- `gra` (Neovim's default) lists fxls's quick fixes and refactors; each edit is verified
    -- in the sandbox when you pick it. :FxlsFixAll applies every fix verified safe.
    vim.api.nvim_buf_create_user_command(buf, "FxlsFixAll", function()
      vim.lsp.buf.code_action({ context = { only = { "source.fixAll.fxls" } }, apply = true })
    end, { desc = "fxls: apply every verified fix of this file" })
    vim.api.nvim_buf_create_user_command(buf, "FxlsTrace", function()
      trace(client, buf)
    end, { desc = "fxls: capture now and show the nn.Module class at the cursor" })
    vim.api.nvim_buf_create_user_command(buf, "FxlsGraph", function()
      graph(client, buf)
    end, { desc = "fxls: the graph of the nn.Module class at the cursor, in a browser" })
  end,
}
