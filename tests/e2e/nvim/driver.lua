-- Headless Neovim driver for tests/e2e/test_neovim.py.
--
-- Environment: FXLS_NVIM_CONFIG (the documented config; empty: init.lua enabled it), FXLS_NVIM_FILE (a Python file),
-- FXLS_NVIM_OUT (where to write the JSON result), FXLS_CMD (JSON array: the server command;
-- unset: the config's default),
-- FXLS_NVIM_HOVERS (JSON array of {needle, offset} to hover).
-- Writes {attached, encoding, diagnostics, lenses_on_open, hovers (value, range and the
-- lines of the float K opens), inlay_hints, code_lenses, error}.

vim.g.loaded_python3_provider = 0
local result = { diagnostics = {}, hovers = {}, inlay_hints = {}, code_lenses = {} }

local here = debug.getinfo(1, "S").source:sub(2):match("(.*/)")
local finish, fail = dofile(here .. "report.lua")(result)

-- FXLS_CMD unset or empty: the config's own default command (`fxls serve` from PATH)
local cmd = os.getenv("FXLS_CMD")
if cmd and cmd ~= "" then
  vim.g.fxls_cmd = vim.json.decode(cmd)
end
vim.g.fxls_settings = { debounceMs = 50 }
-- FXLS_NVIM_CONFIG empty: the test's init.lua enabled fxls from lsp/fxls.lua on 'runtimepath'
local config = os.getenv("FXLS_NVIM_CONFIG")
if config and config ~= "" then
  dofile(config)
end
vim.lsp.config("fxls", {
  on_exit = function(code, signal)
    if not result.done then
      result.error = ("server exited early: code %s signal %s"):format(code, signal)
      vim.schedule(function()
        finish(3)
      end)
    end
  end,
})

local ok, err = pcall(function()
  local buf, client = dofile(here .. "attach.lua")(result)
  if not client then
    return fail("fxls did not attach")
  end
  result.encoding = client.offset_encoding

  if not vim.wait(120000, function()
    return #vim.diagnostic.get(buf) > 0
  end, 20) then
    return fail("no diagnostics")
  end
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    table.insert(result.diagnostics, {
      code = d.code,
      lnum = d.lnum,
      col = d.col,
      end_col = d.end_col,
      severity = d.severity,
      source = d.source,
      message = d.message,
    })
  end

  -- lenses after the first capture, before anything else happens in the buffer (no edit,
  -- no buffer switch, no explicit refresh): the config must fetch them on its own
  vim.wait(10000, function()
    return #vim.lsp.codelens.get(buf) > 0
  end, 20)
  result.lenses_on_open = #vim.lsp.codelens.get(buf)

  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  for _, want in ipairs(vim.json.decode(os.getenv("FXLS_NVIM_HOVERS") or "[]")) do
    local entry = { needle = want.needle }
    for lnum, text in ipairs(lines) do
      local start = text:find(want.needle, 1, true)
      if start then
        -- the cursor column is a byte index; the client converts it to its offset encoding
        vim.api.nvim_win_set_cursor(0, { lnum, start - 1 + (want.offset or 0) })
        local responses = vim.lsp.buf_request_sync(buf, "textDocument/hover", function(c)
          return vim.lsp.util.make_position_params(0, c.offset_encoding)
        end, 10000)
        for _, response in pairs(responses or {}) do
          if response.result then
            entry.value = response.result.contents.value
            entry.range = response.result.range
          end
        end
        -- what the user sees: the lines of the float `K` (vim.lsp.buf.hover) opens
        local main = vim.api.nvim_get_current_win()
        vim.lsp.buf.hover()
        local float
        vim.wait(5000, function()
          for _, win in ipairs(vim.api.nvim_list_wins()) do
            if vim.api.nvim_win_get_config(win).relative ~= "" then
              float = win
              return true
            end
          end
          return false
        end, 20)
        if float then
          local fbuf = vim.api.nvim_win_get_buf(float)
          entry.float = vim.api.nvim_buf_get_lines(fbuf, 0, -1, false)
          vim.api.nvim_win_close(float, true)
          vim.api.nvim_set_current_win(main)
        end
        break
      end
    end
    table.insert(result.hovers, entry)
  end

  vim.wait(10000, function()
    return #vim.lsp.inlay_hint.get({ bufnr = buf }) > 0
  end, 20)
  for _, item in ipairs(vim.lsp.inlay_hint.get({ bufnr = buf })) do
    local hint = item.inlay_hint
    local label = hint.label
    if type(label) == "table" then
      label = table.concat(vim.tbl_map(function(part)
        return part.value
      end, label))
    end
    table.insert(result.inlay_hints, {
      line = hint.position.line,
      character = hint.position.character,
      label = label,
    })
  end

  -- no explicit refresh: the config must have fetched the lenses after the first capture
  vim.wait(10000, function()
    return #vim.lsp.codelens.get(buf) > 0
  end, 20)
  for _, lens in ipairs(vim.lsp.codelens.get(buf)) do
    table.insert(result.code_lenses, {
      line = lens.range.start.line,
      title = lens.command and lens.command.title or nil,
    })
  end
  result.done = true
end)
if not ok then
  fail(tostring(err))
else
  if not result.error then
    finish(0)
  end
end
