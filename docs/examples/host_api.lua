-- Every host function in one engine: what does not fit is summarized into the system prompt.
local fit = require("fit")
local tail = require("tail")

local M = {
  info = { id = "host-api", name = "Host API tour", ownsCompaction = false },
}

function M.ingest(p)
  return { ingested = false }
end

function M.assemble(p)
  local messages, budget = p.messages, p.tokenBudget
  local total = host.tokens(messages) -- a list; counts are cached per stored message
  if total <= budget then
    return { messages = messages, estimatedTokens = total }
  end
  -- Keep a quarter of the budget for a summary of what is left out.
  local summary_budget = budget // 4
  local t = tail.fresh_tail(messages)
  local kept, used = fit.newest_first(messages, budget, { reserve = summary_budget })
  if #kept < #messages - t + 1 then
    -- Even the newest turn does not fit: squeeze it, no summary.
    local out, squeezed = fit.squeeze(messages, budget)
    return { messages = out, estimatedTokens = squeezed }
  end
  local dropped = {} -- kept is a run ending at the newest message
  for i = 1, #messages - #kept do
    dropped[i] = messages[i]
  end
  local addition = nil
  if #dropped > 0 then
    local s = host.summarize(dropped, { maxTokens = summary_budget - 16, instructions = "Keep file paths." })
    addition = "Earlier conversation, summarized:\n" .. s.text
    used += host.tokens(addition)
  end
  -- Our list keeps tool groups whole, so this repairs nothing; it is the host's last pass too.
  local repaired, repairs = host.repairPairing(kept)
  if repairs > 0 then
    host.log.warn(repairs .. " pairing repairs")
  end
  local config = host.config or {} -- nil when the entry has no config
  host.log.info("assembled " .. used .. " of " .. budget .. " tokens (mode: " .. tostring(config.mode) .. ")")
  return { messages = repaired, estimatedTokens = used, systemPromptAddition = addition }
end

function M.compact(p)
  return host.delegateCompaction(p)
end

return M
