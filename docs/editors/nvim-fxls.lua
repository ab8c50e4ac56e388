-- fxls for Neovim 0.11+ (uses vim.lsp.config / vim.lsp.enable).
--
-- Try it:      nvim -u nvim-fxls.lua path/to/model.py
-- Or copy the body into your init.lua. `fxls` must be on PATH (pip install fxls), or set
-- vim.g.fxls_cmd = { "/path/to/python", "-m", "fxls", "serve" } before this file runs.

vim.g.loaded_python3_provider = 0 -- fxls does not need Neovim's Python provider

-- Settings sent to the server (workspace/configuration, section "fxls").
-- Every key is optional; docs/configuration.md lists them with their defaults.
local settings = {
  fxls = {
    python = "", -- interpreter with torch for the worker; "" = the server's own
    debounceMs = 300,
    limits = { timeoutSeconds = 10, cpuSeconds = 12, memoryMB = 2048, fileSizeMB = 64 },
    inlayHints = { enabled = true },
    codeLens = { enabled = true },
    isolation = { seccomp = true, landlock = true },
    capture = { metaInit = true, symbolic = true },
  },
}
if vim.g.fxls_settings then
  settings.fxls = vim.tbl_deep_extend("force", settings.fxls, vim.g.fxls_settings)
end

vim.lsp.config("fxls", {
  cmd = vim.g.fxls_cmd or { "fxls", "serve" },
  filetypes = { "python" },
  root_markers = { "pyproject.toml", "setup.py", "setup.cfg", ".git" },
  -- fxls executes the files you open (in a sandbox). Set trusted = false to turn that off.
  init_options = { trusted = true },
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
    vim.api.nvim_create_autocmd({ "BufEnter", "InsertLeave", "BufWritePost" }, {
      group = vim.api.nvim_create_augroup("fxls-codelens-" .. buf, { clear = true }),
      buffer = buf,
      callback = function()
        vim.lsp.codelens.refresh({ bufnr = buf })
      end,
    })
    -- K shows the hover (named arguments and shapes); diagnostics use vim.diagnostic.
  end,
})
