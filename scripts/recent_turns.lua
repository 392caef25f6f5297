-- recent_turns: the simplest engine that owns compaction.
--
-- Policy: always send the fresh tail (the newest user message and everything after it: the
-- assistant's tool calls and all their results), then fill the rest of the budget with older
-- messages, newest first, whole tool groups only. A compaction summary at the start of the
-- session is kept in front when it fits. If the fresh tail alone is over the budget (a huge
-- tool result), it is squeezed: oversized results trimmed, oldest groups dropped.
--
-- Compaction: `ownsCompaction = true`, so the host never auto-compacts for this engine; `/compact`
-- and overflow recovery call `compact`, which runs the host's built-in compaction (older
-- messages summarized into one compactionSummary, recent ones kept) and so frees tokens on an
-- over-budget session.
--
-- Configuration (plugins.entries["recent-turns"].config):
--   minTailMessages  number  default 0   keep at least this many newest messages in the tail

local fit = require("fit")
local tail = require("tail")

return function(ctx)
  local config = ctx.config or {}
  local min_tail = config.minTailMessages or 0

  local M = {
    info = {
      id = "recent-turns",
      name = "Recent turns",
      version = "1.0.0",
      ownsCompaction = true,
    },
  }

  function M.ingest(p)
    return { ingested = false }
  end

  function M.assemble(p)
    local messages, budget = p.messages, p.tokenBudget
    local n = #messages
    local t = tail.fresh_tail(messages, { minMessages = min_tail })
    local tail_tokens = tail.tokens(messages, t)
    if tail_tokens > budget then
      local out, used = fit.squeeze(messages, budget)
      return { messages = out, estimatedTokens = used }
    end

    local out, reserve, from = {}, tail_tokens, 1
    local first = messages[1]
    if t > 1 and first.role == "compactionSummary" then
      from = 2
      local s = host.tokens(first)
      if s + reserve <= budget then
        out[1] = first
        reserve += s
      end
    end
    local kept, used = fit.newest_first(messages, budget, { reserve = reserve, from = from, to = t - 1 })
    for i = 1, #kept do
      out[#out + 1] = kept[i]
    end
    for i = t, n do
      out[#out + 1] = messages[i]
    end
    return { messages = out, estimatedTokens = used + reserve }
  end

  function M.compact(p)
    return host.delegateCompaction(p)
  end

  return M
end
