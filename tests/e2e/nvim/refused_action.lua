-- Headless Neovim driver for the refused code action test in tests/e2e/test_neovim.py.
--
-- Environment: FXLS_NVIM_CONFIG (the documented config), FXLS_NVIM_FILE (a Python file),
-- FXLS_NVIM_OUT (where to write the JSON result), FXLS_CMD (JSON array: the server command),
-- FXLS_NVIM_CODE (the diagnostic code), FXLS_NVIM_LINE (a plain substring of the line the
-- diagnostic must be on), FXLS_NVIM_TITLE (a plain substring of the action title).
-- Puts the cursor on that diagnostic, picks the action with vim.lsp.buf.code_action({apply =
-- true, filter = ...}) (Neovim resolves it with codeAction/resolve), waits for the server's
-- window/showMessage (Neovim echoes it into :messages) and writes {attached, titles,
-- messages, lines, error}: what the user sees, and the buffer, which must not change.

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

  local code = assert(os.getenv("FXLS_NVIM_CODE"))
  local on = assert(os.getenv("FXLS_NVIM_LINE"))
  local want = assert(os.getenv("FXLS_NVIM_TITLE"))
  local target
  vim.wait(120000, function()
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      local text = vim.api.nvim_buf_get_lines(buf, d.lnum, d.lnum + 1, false)[1] or ""
      if d.code == code and text:find(on, 1, true) then
        target = d
        return true
      end
    end
    return false
  end, 20)
  if not target then
    return fail("no " .. code .. " diagnostic on " .. on)
  end
  vim.api.nvim_win_set_cursor(0, { target.lnum + 1, target.col })
  local before = vim.api.nvim_exec2("messages", { output = true }).output
  vim.lsp.buf.code_action({
    apply = true,
    filter = function(action)
      table.insert(result.titles, action.title)
      return action.kind == "quickfix" and action.title:find(want, 1, true) ~= nil
    end,
  })
  local said = vim.wait(60000, function()
    return vim.api.nvim_exec2("messages", { output = true }).output ~= before
  end, 20)
  if not said then
    return fail("Neovim showed no message")
  end
  vim.wait(200)
  result.messages = vim.api.nvim_exec2("messages", { output = true }).output
  result.lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  result.done = true
end)
if not ok then
  fail(tostring(err))
elseif not result.error then
  finish(0)
end
