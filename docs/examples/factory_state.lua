-- A factory reads its config once; p.state remembers things across calls and restarts.
local fit = require("fit")

return function(ctx)
  local keep_ratio = (ctx.config and ctx.config.keepRatio) or 0.9

  local M = {
    info = { id = "factory-state", name = "Factory and state", ownsCompaction = false },
  }

  function M.ingest(p)
    p.state.seen = (p.state.seen or 0) + 1
    return { ingested = true }
  end

  function M.assemble(p)
    local budget = p.tokenBudget * keep_ratio // 1
    local kept, tokens = fit.newest_first(p.messages, budget)
    host.log.debug("sending " .. #kept .. " of " .. #p.messages .. " messages; seen " .. (p.state.seen or 0))
    return { messages = kept, estimatedTokens = tokens }
  end

  function M.compact(p)
    return host.delegateCompaction(p)
  end

  -- A key already committed gives "duplicate" and changes nothing.
  function M.commitTurn(p)
    p.state.committed = p.state.committed or {}
    if p.state.committed[p.advancementKey] then
      return { status = "duplicate" }
    end
    p.state.committed[p.advancementKey] = true
    return { status = "committed" }
  end

  return M
end
