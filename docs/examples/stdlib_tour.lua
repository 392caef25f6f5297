-- The stdlib in one engine: prune old tool results, keep pinned messages, fit the rest.
local fit = require("fit")
local groups = require("groups")
local msg = require("msg")
local pin = require("pin")
local prune = require("prune")
local tail = require("tail")

local M = {
  info = { id = "stdlib-tour", name = "Stdlib tour", ownsCompaction = false },
}

function M.ingest(p)
  -- Pin every message the user marks with "[pin]", by id, so the pin outlives an edit.
  if pin.is_pinned(p.message, p.state) then
    pin.pin(p.state, p.message.id)
  end
  return { ingested = true }
end

function M.assemble(p)
  local budget = p.tokenBudget
  -- 1. Soft-trim and, if still over budget, clear old tool results (last 2 turns spared).
  local messages = prune.tool_results(p.messages, { keepTurns = 2, budget = budget })
  -- 2. Pinned tool groups go first; the rest fills newest first around the fresh tail.
  local pinned, rest = pin.partition(messages, p.state)
  local pinned_tokens = fit.total(pinned)
  if pinned_tokens > budget // 2 then
    pinned, pinned_tokens = {}, 0 -- too many pins: drop them rather than the conversation
  end
  local t = tail.fresh_tail(rest)
  local tail_tokens = tail.tokens(rest, t)
  if pinned_tokens + tail_tokens > budget then
    local out, used = fit.squeeze(rest, budget)
    return { messages = out, estimatedTokens = used }
  end
  local kept, used = fit.newest_first(rest, budget, { reserve = pinned_tokens + tail_tokens, to = t - 1 })
  local out = {}
  for _, m in ipairs(pinned) do
    out[#out + 1] = m
  end
  for _, m in ipairs(kept) do
    out[#out + 1] = m
  end
  for _, m in ipairs(groups.slice(rest, { first = t, last = #rest })) do
    out[#out + 1] = m
  end
  -- msg helpers read any message shape; copies keep the id.
  host.log.debug("newest user text: " .. msg.text(rest[t] or msg.user("")))
  return { messages = out, estimatedTokens = used + pinned_tokens + tail_tokens }
end

function M.compact(p)
  return host.delegateCompaction(p)
end

return M
