-- The smallest sound engine: send the newest messages that fit, let the host compact.
local fit = require("fit")

local M = {
  info = { id = "minimal", name = "Minimal", version = "1.0.0", ownsCompaction = false },
}

function M.ingest(p)
  return { ingested = false }
end

function M.assemble(p)
  local kept, tokens = fit.newest_first(p.messages, p.tokenBudget)
  return { messages = kept, estimatedTokens = tokens }
end

function M.compact(p)
  return host.delegateCompaction(p)
end

return M
