-- Shared by the headless Neovim drivers: writes the driver's result table as JSON to
-- $FXLS_NVIM_OUT and quits (exit 0 on success; 2 with result.error set on failure).
-- Usage: local finish, fail = dofile(<this file>)(result)
return function(result)
  local out_path = assert(os.getenv("FXLS_NVIM_OUT"))

  local function finish(code)
    local f = assert(io.open(out_path, "w"))
    f:write(vim.json.encode(result))
    f:close()
    if code == 0 then
      vim.cmd("qall!")
    else
      vim.cmd("cquit " .. code)
    end
  end

  local function fail(message)
    result.error = message
    finish(2)
  end

  return finish, fail
end
