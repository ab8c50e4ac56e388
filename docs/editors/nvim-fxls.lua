-- fxls for Neovim 0.11+ (uses vim.lsp.config / vim.lsp.enable).
--
-- Try it:      nvim -u nvim-fxls.lua path/to/model.py
-- Or copy the body into your init.lua. `fxls` must be on PATH (pip install fxls), or set
-- vim.g.fxls_cmd = { "/path/to/python", "-P", "-m", "fxls", "serve" } before this file runs
-- (leave out -P on Python 3.10).

vim.g.loaded_python3_provider = 0 -- fxls does not need Neovim's Python provider

-- Settings sent to the server (workspace/configuration, section "fxls").
-- Every key is optional; docs/configuration.md lists them with their defaults.
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

vim.lsp.config("fxls", {
  cmd = vim.g.fxls_cmd or { "fxls", "serve" },
  cmd_cwd = server_cwd,
  cmd_env = { PYTHONSAFEPATH = "1" },
  filetypes = { "python" },
  root_markers = { "pyproject.toml", "setup.py", "setup.cfg", ".git" },
  init_options = init_options,
  settings = settings,
})
vim.lsp.enable("fxls")

vim.api.nvim_create_autocmd("LspAttach", {
  group = vim.api.nvim_create_augroup("fxls", { clear = true }),
  callback = function(args)
    local client = vim.lsp.get_client_by_id(args.data.client_id)
    if not client or client.name ~= "fxls" then
      return
    end
    local buf = args.buf
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
  end,
})
