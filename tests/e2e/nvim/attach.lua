-- Shared by the drivers: open FXLS_NVIM_FILE and wait until fxls has attached to it.
-- Returns the buffer and the client, or the buffer and nil when fxls did not attach within
-- 30 s. Sets result.attached.
return function(result)
  vim.cmd.edit(assert(os.getenv("FXLS_NVIM_FILE")))
  local buf = vim.api.nvim_get_current_buf()
  local client
  vim.wait(30000, function()
    client = vim.lsp.get_clients({ bufnr = buf, name = "fxls" })[1]
    return client ~= nil and client.initialized
  end, 20)
  result.attached = client ~= nil
  return buf, client
end
