-- Headless Neovim driver for the :FxlsTrace and :checkhealth tests (tests/e2e/test_neovim.py).
--
-- Environment: FXLS_NVIM_FILE (a Python file), FXLS_NVIM_OUT (the JSON result), FXLS_CMD
-- (JSON array: the server command), FXLS_NVIM_CONFIG (a config file to run; unset when the
-- test's init.lua already enabled fxls from lsp/fxls.lua on 'runtimepath'),
-- FXLS_NVIM_TRACES (JSON array of {needle, offset, replace = {old, new}}: optionally edit the
-- buffer, put the cursor on `needle`, run :FxlsTrace), FXLS_NVIM_GRAPH (run :FxlsGraph there).
-- Writes {attached, traces = [{notifications, float, progress}], health, error}: what the
-- user sees (vim.notify messages, the lines of the float, LspProgress messages, the
-- :checkhealth buffer).

vim.g.loaded_python3_provider = 0
local result = { traces = {} }

local here = debug.getinfo(1, "S").source:sub(2):match("(.*/)")
local finish, fail = dofile(here .. "report.lua")(result)

local notified = {}
vim.notify = function(msg, level)
  table.insert(notified, { message = msg, level = level })
end
local progress = {}
vim.api.nvim_create_autocmd("LspProgress", {
  callback = function(args)
    local value = args.data and args.data.params and args.data.params.value or {}
    table.insert(progress, { kind = value.kind, message = value.message })
  end,
})

local cmd = os.getenv("FXLS_CMD")
if cmd and cmd ~= "" then
  vim.g.fxls_cmd = vim.json.decode(cmd)
end
-- A one-minute debounce: a trace that shows an edit at once captured it itself.
vim.g.fxls_settings = { debounceMs = 60000 }
local config = os.getenv("FXLS_NVIM_CONFIG")
if config and config ~= "" then
  dofile(config)
end

local function floats()
  local found = {}
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    if vim.api.nvim_win_get_config(win).relative ~= "" then
      table.insert(found, win)
    end
  end
  return found
end

local ok, err = pcall(function()
  local buf, client = dofile(here .. "attach.lua")(result)
  if not client then
    return fail("fxls did not attach")
  end
  -- the server process: where it runs and with which environment (never in the project)
  local stats = client:request_sync("fxls/stats", {}, 5000)
  local pid = stats and stats.result and stats.result.pid
  if pid then
    local environ = io.open("/proc/" .. pid .. "/environ", "rb")
    result.server = {
      pid = pid,
      cwd = vim.uv.fs_readlink("/proc/" .. pid .. "/cwd"),
      safepath = environ and environ:read("*a"):find("PYTHONSAFEPATH=1\0", 1, true) ~= nil,
    }
    if environ then
      environ:close()
    end
  end
  result.commands = vim.tbl_keys(vim.api.nvim_buf_get_commands(buf, {}))
  if not vim.wait(120000, function()
    return #vim.diagnostic.get(buf) > 0
  end, 20) then
    return fail("no diagnostics")
  end

  for _, want in ipairs(vim.json.decode(os.getenv("FXLS_NVIM_TRACES") or "[]")) do
    local entry = { needle = want.needle }
    if want.replace then
      local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
      for i, text in ipairs(lines) do
        local s, e = text:find(want.replace[1], 1, true)
        if s then
          local new = text:sub(1, s - 1) .. want.replace[2] .. text:sub(e + 1)
          vim.api.nvim_buf_set_lines(buf, i - 1, i, false, { new })
          break
        end
      end
    end
    for lnum, text in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
      local start = text:find(want.needle, 1, true)
      if start then
        vim.api.nvim_win_set_cursor(0, { lnum, start - 1 + (want.offset or 0) })
        break
      end
    end
    local first_note, first_progress = #notified + 1, #progress + 1
    local main = vim.api.nvim_get_current_win()
    vim.cmd("FxlsTrace")
    -- done when a second notification (after "tracing…") arrives
    vim.wait(60000, function()
      return #notified >= first_note + 1
    end, 20)
    vim.wait(500, function()
      return #floats() > 0
    end, 20)
    entry.notifications = vim.list_slice(notified, first_note)
    entry.progress = vim.list_slice(progress, first_progress)
    local float = floats()[1]
    if float then
      entry.float = vim.api.nvim_buf_get_lines(vim.api.nvim_win_get_buf(float), 0, -1, false)
      vim.api.nvim_win_close(float, true)
      vim.api.nvim_set_current_win(main)
    end
    table.insert(result.traces, entry)
  end

  -- :FxlsGraph on FXLS_NVIM_GRAPH: the page is written and handed to vim.ui.open (recorded
  -- here instead of starting a browser)
  local graph_needle = os.getenv("FXLS_NVIM_GRAPH")
  if graph_needle and graph_needle ~= "" then
    vim.ui.open = function(path)
      result.opened = path
      return {}, nil
    end
    for lnum, text in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
      local start = text:find(graph_needle, 1, true)
      if start then
        vim.api.nvim_win_set_cursor(0, { lnum, start - 1 })
        break
      end
    end
    local first = #notified + 1
    vim.cmd("FxlsGraph")
    vim.wait(60000, function()
      return #notified >= first
    end, 20)
    result.graph_notifications = vim.list_slice(notified, first)
  end

  -- :checkhealth as a user runs it, with fxls attached; its buffer is what they read
  vim.cmd("checkhealth vim.lsp fxls")
  vim.wait(10000, function()
    local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
    return text:find("fxls: server", 1, true) ~= nil and text:find("isolation", 1, true) ~= nil
  end, 50)
  result.health = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  result.done = true
end)
if not ok then
  fail(tostring(err))
elseif not result.error then
  finish(0)
end
