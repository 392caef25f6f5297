-- tool-pruner: a pipeline hook that, under token pressure, trims old tool results in memory
-- (the transcript is never rewritten): results older than the last `keepTurns` turns are
-- soft-trimmed, then cleared, until the session fits.
--
-- Configuration (plugins.entries["tool-pruner"].config), all optional:
--   keepTurns  number  default 2   newest turns whose tool results are never touched

local prune = require("prune")

local M = {
  info = { id = "tool-pruner", name = "Tool result pruner", version = "1.0.0" },
}

function M.prune(p)
  local config = host.config or {}
  local pruned = prune.tool_results(p.messages, {
    keepTurns = config.keepTurns or 2,
    budget = p.tokenWindow.contextWindowTokens,
  })
  return { messages = pruned }
end

return M
