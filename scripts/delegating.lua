-- delegating: a pass-through engine that leaves compaction to the host.
--
-- Policy: send the whole session when it fits the budget (the very same message tables, so it
-- costs nothing and keeps the prompt cache warm). When it does not fit, send the newest whole
-- tool groups that do; if even the fresh tail (newest user message and its tool replies) is
-- over the budget, squeeze it.
--
-- Compaction: `ownsCompaction = false`. The host's built-in auto-compaction runs when the window
-- fills, and `compact` (for `/compact` and overflow recovery) delegates to the same built-in
-- compaction, which is the safe pattern for a non-owning engine.
--
-- Configuration: none.

local fit = require("fit")
local tail = require("tail")

local M = {
  info = {
    id = "delegating",
    name = "Delegating pass-through",
    version = "1.0.0",
    ownsCompaction = false,
  },
}

function M.ingest(p)
  return { ingested = false }
end

function M.assemble(p)
  local messages, budget = p.messages, p.tokenBudget
  local total = host.tokens(messages)
  if total <= budget then
    return { messages = messages, estimatedTokens = total }
  end
  local t = tail.fresh_tail(messages)
  local kept, used = fit.newest_first(messages, budget)
  if #kept >= #messages - t + 1 then
    return { messages = kept, estimatedTokens = used }
  end
  local out, squeezed = fit.squeeze(messages, budget)
  return { messages = out, estimatedTokens = squeezed }
end

M.compact = function(p)
  return host.delegateCompaction(p)
end

return M
