-- recent_turns: the simplest engine that owns compaction.
--
-- Policy: always send the fresh tail (the newest user message and everything after it: the
-- assistant's tool calls and all their results), then fill the rest of the budget with older
-- messages, newest first, whole tool groups only. A compaction summary at the start of the
-- session is kept in front when it fits. The model always gets some history when there was
-- any: when no whole older group fits, the newest one is squeezed into the room left (if the
-- tail leaves any); when the fresh tail alone is over the budget (a long tool loop, a huge
-- tool result), an eighth of the budget goes to the newest earlier messages (trimmed if they
-- must), the request is kept (trimmed to a quarter of the budget if larger) and the rest of
-- the tail is squeezed: oversized results trimmed, oldest groups dropped.
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
local groups = require("groups")
local msg = require("msg")

return function(ctx)
  local config = ctx.config or {}
  local min_tail = config.minTailMessages or 0

  -- The newest group ending at messages[last], squeezed into `room` (nothing below 32 tokens).
  local function newest_group(messages, last, room)
    if room < 32 then
      return {}, 0
    end
    local group = {}
    for i = groups.group_start(messages, last), last do
      group[#group + 1] = messages[i]
    end
    return fit.squeeze(group, room)
  end

  -- The fresh tail (from messages[t]) is over budget: the newest history in an eighth of the
  -- budget, the request, and the rest of the tail squeezed into what is left.
  local function squeezed(messages, t, budget)
    local out, used = {}, 0
    if t > 1 then
      local kept, u = fit.newest_first(messages, budget // 8, { to = t - 1 })
      if #kept == 0 then
        kept, u = newest_group(messages, t - 1, budget // 8)
      end
      for i = 1, #kept do
        out[#out + 1] = kept[i]
      end
      used += u
    end
    local from = t
    if messages[t].role == "user" then
      local request = msg.trim(messages[t], budget // 4)
      out[#out + 1] = request
      used += host.tokens(request)
      from = t + 1
    end
    local rest = {}
    for i = from, #messages do
      rest[#rest + 1] = messages[i]
    end
    local kept, u = fit.squeeze(rest, budget - used)
    for i = 1, #kept do
      out[#out + 1] = kept[i]
    end
    return { messages = out, estimatedTokens = used + u }
  end

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
      return squeezed(messages, t, budget)
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
    if #kept == 0 and #out == 0 and t > 1 then
      -- Not even the newest older group fits whole: squeeze it into the room left, or, when
      -- the tail leaves too little, squeeze the tail to make room for it.
      kept, used = newest_group(messages, t - 1, budget - reserve)
      if #kept == 0 then
        return squeezed(messages, t, budget)
      end
    end
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
