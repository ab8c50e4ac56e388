-- :checkhealth fxls — the server command, the running server (fxls version) and its worker
-- (interpreter, torch, sandbox layers), as the server reports them (request fxls/stats).
local M = {}

local function stats(client)
  local reply = client:request_sync("fxls/stats", {}, 5000)
  if reply and reply.result then
    return reply.result
  end
  return nil, reply and reply.err and reply.err.message or "no answer within 5 s"
end

function M.check()
  vim.health.start("fxls: configuration")
  local config = vim.lsp.config.fxls
  if not config then
    vim.health.error("no fxls configuration: put lsp/fxls.lua on 'runtimepath' (see docs/editors/neovim.md)")
    return
  end
  local cmd = config.cmd
  if type(cmd) == "table" then
    local line = table.concat(cmd, " ")
    if vim.fn.executable(cmd[1]) == 1 then
      vim.health.ok("server command: " .. line)
    else
      vim.health.error(("server command: %s: '%s' is not executable"):format(line, cmd[1]), {
        "install fxls (see docs/getting-started.md) or set vim.g.fxls_cmd",
      })
    end
  end
  if config.cmd_cwd then
    vim.health.info("server working directory: " .. config.cmd_cwd .. " (never the project)")
  end
  if vim.lsp.is_enabled and not vim.lsp.is_enabled("fxls") then
    vim.health.warn("fxls is not enabled: call vim.lsp.enable('fxls')")
  end

  vim.health.start("fxls: server")
  local clients = vim.lsp.get_clients({ name = "fxls" })
  if #clients == 0 then
    vim.health.info("not running: open a Python file to start it")
    return
  end
  for _, client in ipairs(clients) do
    local version = vim.tbl_get(client, "server_info", "version") or "?"
    vim.health.ok(("fxls %s running (client id %d, root %s)"):format(version, client.id, client.root_dir or "none"))
    local result, err = stats(client)
    if not result then
      vim.health.warn("fxls/stats: " .. err)
    else
      if result.trusted == false then
        vim.health.warn("not trusted (init_options.trusted = false): fxls runs none of your code")
      end
      local worker = result.worker
      if worker == nil or worker == vim.NIL then
        vim.health.info("worker: not started yet (it starts with the first capture)")
      else
        vim.health.ok(("worker: %s, torch %s"):format(worker.python, worker.torch))
        vim.health.ok("isolation: " .. table.concat(worker.isolation or {}, ", "))
        for layer, why in pairs(worker.unavailable or {}) do
          vim.health.warn(("isolation layer %s unavailable: %s"):format(layer, why))
        end
      end
    end
  end
end

return M
