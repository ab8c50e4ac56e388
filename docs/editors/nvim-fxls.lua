-- fxls for Neovim 0.11+ (vim.lsp.config / vim.lsp.enable), runnable as it is:
--
--   nvim -u docs/editors/nvim-fxls.lua path/to/model.py
--
-- It puts this folder on 'runtimepath', so Neovim finds the server's configuration in
-- lsp/fxls.lua (the format nvim-lspconfig ships) and `:checkhealth fxls` in lua/fxls/health.lua,
-- then enables the server. To install it for good, copy lsp/fxls.lua to ~/.config/nvim/lsp/
-- (and lua/fxls/health.lua to ~/.config/nvim/lua/fxls/) and put vim.lsp.enable("fxls") in
-- your init.lua.
--
-- `fxls` must be on PATH (install it from a checkout or a wheel, see
-- docs/getting-started.md), or set before this file runs:
--   vim.g.fxls_cmd = { "/path/to/python", "-P", "-m", "fxls", "serve" }
-- (leave out -P on Python 3.10), and optionally vim.g.fxls_settings = { debounceMs = 500 }.

vim.g.loaded_python3_provider = 0 -- fxls does not need Neovim's Python provider

local here = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, "S").source:sub(2)))
vim.opt.runtimepath:prepend(here)
vim.lsp.enable("fxls")
