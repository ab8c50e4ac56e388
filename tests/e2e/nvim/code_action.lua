-- Headless Neovim driver for the code action test in tests/e2e/test_neovim.py.
--
-- Environment: FXLS_NVIM_CONFIG (the documented config), FXLS_NVIM_FILE (a Python file),
-- FXLS_NVIM_OUT (where to write the JSON result), FXLS_CMD (JSON array: the server command),
-- FXLS_NVIM_CODE (the diagnostic code to fix), FXLS_NVIM_TITLE (a plain substring of the action
-- title to apply), FXLS_NVIM_FIX_ALL (set: then run :FxlsFixAll), FXLS_NVIM_AT (instead of a
-- diagnostic: a refactor at the first occurrence of this text, e.g. a pass's name).
-- Puts the cursor on the diagnostic, runs vim.lsp.buf.code_action({apply = true, filter = ...})
-- (Neovim resolves the action with codeAction/resolve and applies its WorkspaceEdit), waits
-- for the buffer to change and writes {attached, titles, lines, fixed_all_lines, error}.

vim.g.loaded_python3_provider = 0
local result = { titles = {} }

local here = debug.getinfo(1, "S").source:sub(2):match("(.*/)")
local finish, fail = dofile(here .. "report.lua")(result)

vim.g.fxls_cmd = vim.json.decode(assert(os.getenv("FXLS_CMD")))
vim.g.fxls_settings = { debounceMs = 50 }
dofile(assert(os.getenv("FXLS_NVIM_CONFIG")))

local ok, err = pcall(function()
  local buf, client = dofile(here .. "attach.lua")(result)
  if not client then
    return fail("fxls did not attach")
  end

  local want = assert(os.getenv("FXLS_NVIM_TITLE"))
  local at = os.getenv("FXLS_NVIM_AT")
  if at then
    -- a refactor: the cursor on the first occurrence of FXLS_NVIM_AT, then wait until the
    -- server (once the file is captured) lists an action with the wanted title there
    local row, col
    for i, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
      local found = line:find(at, 1, true)
      if found then
        row, col = i, found - 1
        break
      end
    end
    if not row then
      return fail("no " .. at .. " in the file")
    end
    vim.api.nvim_win_set_cursor(0, { row, col })
    local listed = vim.wait(120000, function()
      local params = vim.lsp.util.make_range_params(0, client.offset_encoding)
      params.context = { diagnostics = {}, only = { "refactor" } }
      local answer = vim.lsp.buf_request_sync(buf, "textDocument/codeAction", params, 5000) or {}
      for _, response in pairs(answer) do
        for _, action in ipairs(response.result or {}) do
          if action.title and action.title:find(want, 1, true) then
            return true
          end
        end
      end
      return false
    end, 200)
    if not listed then
      return fail("no action " .. want .. " at " .. at)
    end
    local before = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
    vim.lsp.buf.code_action({
      apply = true,
      context = { diagnostics = {}, only = { "refactor" } },
      filter = function(action)
        table.insert(result.titles, action.title)
        return action.title:find(want, 1, true) ~= nil
      end,
    })
    local changed = vim.wait(60000, function()
      return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n") ~= before
    end, 20)
    if not changed then
      return fail("the buffer did not change")
    end
    result.lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    result.done = true
    return
  end

  local code = assert(os.getenv("FXLS_NVIM_CODE"))
  local target
  vim.wait(120000, function()
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      if d.code == code then
        target = d
        return true
      end
    end
    return false
  end, 20)
  if not target then
    return fail("no " .. code .. " diagnostic")
  end
  vim.api.nvim_win_set_cursor(0, { target.lnum + 1, target.col })
  local before = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
  vim.lsp.buf.code_action({
    apply = true,
    filter = function(action)
      table.insert(result.titles, action.title)
      return action.kind == "quickfix" and action.title:find(want, 1, true) ~= nil
    end,
  })
  local changed = vim.wait(60000, function()
    return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n") ~= before
  end, 20)
  if not changed then
    return fail("the buffer did not change")
  end
  result.lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)

  if os.getenv("FXLS_NVIM_FIX_ALL") then
    -- the capture of the edited text comes first; then every remaining verified fix
    vim.wait(60000, function()
      local remaining = 0
      for _, d in ipairs(vim.diagnostic.get(buf)) do
        if d.code == code then
          remaining = remaining + 1
        end
      end
      return remaining == 1
    end, 20)
    local mid = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
    vim.cmd("FxlsFixAll")
    vim.wait(60000, function()
      return table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n") ~= mid
    end, 20)
    result.fixed_all_lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  end
  result.done = true
end)
if not ok then
  fail(tostring(err))
elseif not result.error then
  finish(0)
end
