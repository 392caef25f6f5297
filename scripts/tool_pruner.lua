-- tool_pruner: prune old tool results before fitting (like Claude Code's microcompact and
-- Anthropic's tool-result clearing), so long agentic sessions keep more of their conversation.
--
-- Policy: while the session fits under `triggerRatio` of the budget it is sent unchanged (the
-- prompt cache stays warm). Past that, tool results older than the last `keepTurns` turns are
-- soft-trimmed (head and tail kept), then the oldest are cleared to a placeholder until the
-- session fits the budget; what remains is fitted newest first around the fresh tail, whole
-- tool groups only.
--
-- Compaction: `ownsCompaction = false`; `compact` delegates to the host's built-in compaction.
--
-- Configuration (plugins.entries["tool-pruner"].config), all optional:
--   triggerRatio   number  default 0.8    prune once the session passes this share of the budget
--   keepTurns      number  default 2      newest turns whose tool results are never touched
--   softTrimChars  number  default 4000   results longer than this are soft-trimmed
--   headChars      number  default 1500   kept from the start of a trimmed result
--   tailChars      number  default 1500   kept from its end
--   placeholder    string  default "[Old tool result content cleared]"

local fit = require("fit")
local prune = require("prune")
local tail = require("tail")

return function(ctx)
  local config = ctx.config or {}
  local trigger = config.triggerRatio or 0.8

  local M = {
    info = {
      id = "tool-pruner",
      name = "Tool result pruner",
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
    if total <= budget * trigger then
      return { messages = messages, estimatedTokens = total }
    end
    local pruned = prune.tool_results(messages, {
      keepTurns = config.keepTurns or 2,
      softTrimChars = config.softTrimChars,
      headChars = config.headChars,
      tailChars = config.tailChars,
      placeholder = config.placeholder,
      budget = budget,
    })
    local n = #pruned
    local t = tail.fresh_tail(pruned)
    local tail_tokens = tail.tokens(pruned, t)
    if tail_tokens > budget then
      local out, used = fit.squeeze(pruned, budget)
      return { messages = out, estimatedTokens = used }
    end
    local out, used = fit.newest_first(pruned, budget, { reserve = tail_tokens, to = t - 1 })
    for i = t, n do
      out[#out + 1] = pruned[i]
    end
    return { messages = out, estimatedTokens = used + tail_tokens }
  end

  function M.compact(p)
    return host.delegateCompaction(p)
  end

  return M
end
