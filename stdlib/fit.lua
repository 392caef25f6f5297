-- fit: fit messages into a token budget without ever splitting a tool call from its results.
--
--   local fit = require("fit")
--   fit.newest_first(messages, budget, opts) -> kept, tokens
--       Fills `budget` (minus opts.reserve) with whole tool groups, newest first, and returns
--       the kept messages in their original order (the very same tables) with their tokens.
--       It stops at the first group that does not fit, so the result is one contiguous run
--       ending at the newest message; opts.gaps = true keeps going and also takes older groups
--       that still fit (the context then has holes).
--       opts.reserve (default 0): tokens set aside for something else (a tail, a summary, a
--         systemPromptAddition).
--       opts.from, opts.to (default 1, #messages): only consider messages[from..to]; a group
--         that starts before `from` is not taken.
--       opts.count (default "host"): how a message's tokens are counted: "host" (host.tokens),
--         "o200k_base" / "cl100k_base" (that exact BPE), "textChars/4" (ceil(chars / 4) of the
--         message's text, text blocks joined by "\n").
--       It is host.fit(messages, budget, opts), which walks the list in the host.
--   fit.squeeze(messages, budget) -> kept, tokens
--       The last resort, for when even the part you must send is over budget (a 40,000-token
--       file read in an 8,000-token window). Guarantees tokens <= budget: returns `messages`
--       itself when it fits; else trims tool results larger than budget/8 (head and tail kept),
--       drops the oldest tool groups (keeping the newest), then trims the remaining messages'
--       text to a common cap; a newest group that cannot fit even then (huge tool-call
--       arguments, images) is left out and the rest squeezed again. Empty only if nothing fits.
--   fit.total(messages) -> the sum of host.tokens over the list
--
-- newest_first is O(kept messages), in the host; squeeze is O(n) plus the cost of trimming.

local groups = require("groups")
local msg = require("msg")

local M = {}

-- A plain copy of a list. (Not table.clone: the host's lists carry a protected metatable.)
local function copy_list(list)
  local out = {}
  for i = 1, #list do
    out[i] = list[i]
  end
  return out
end


function M.total(messages)
  local total = 0
  for i = 1, #messages do
    total += host.tokens(messages[i])
  end
  return total
end

function M.newest_first(messages, budget, opts)
  -- The walk runs in the host (host.fit: the same rule, without a script loop per message).
  return host.fit(messages, budget, opts)
end

-- The largest cap c such that the sizes, each limited to c, add up to at most budget.
local function water_level(sizes, budget)
  local sorted = table.clone(sizes)
  table.sort(sorted)
  local remaining, left = budget, #sorted
  for k = 1, #sorted do
    local s = sorted[k]
    if s * left > remaining then
      return remaining // left
    end
    remaining -= s
    left -= 1
  end
  return math.huge
end

-- Squeezes `messages` into `budget` keeping the newest tool group; nil when that group cannot
-- fit even with its text trimmed.
local function squeeze_keeping_newest(messages, budget)
  local n = #messages
  local sizes = {}
  local total = 0
  for i = 1, n do
    sizes[i] = host.tokens(messages[i])
    total += sizes[i]
  end
  if total <= budget then
    return messages, total
  end

  -- 1. Trim oversized tool results.
  local out = copy_list(messages)
  local cap = math.max(budget // 8, 64)
  for i = 1, n do
    if out[i].role == "toolResult" and sizes[i] > cap then
      out[i] = msg.trim(out[i], cap)
      local s = host.tokens(out[i])
      total += s - sizes[i]
      sizes[i] = s
    end
  end

  -- 2. Drop the oldest tool groups, keeping the newest.
  local gs = groups.tool_groups(out)
  local k = 1
  while total > budget and k < #gs do
    for i = gs[k].first, gs[k].last do
      total -= sizes[i]
    end
    k += 1
  end
  local kept, kept_sizes = {}, {}
  for i = gs[k].first, n do
    kept[#kept + 1] = out[i]
    kept_sizes[#kept_sizes + 1] = sizes[i]
  end
  if total <= budget then
    return kept, total
  end

  -- 3. The newest group alone is too big: trim its messages to a common cap.
  local level = water_level(kept_sizes, budget)
  total = 0
  for i = 1, #kept do
    if kept_sizes[i] > level then
      kept[i] = msg.trim(kept[i], level)
      kept_sizes[i] = host.tokens(kept[i])
    end
    total += kept_sizes[i]
  end
  if total <= budget then
    return kept, total
  end
  return nil
end

function M.squeeze(messages, budget)
  local list = messages
  while #list > 0 do
    local out, used = squeeze_keeping_newest(list, budget)
    if out then
      return out, used
    end
    -- 4. The newest group cannot fit at all (huge tool-call arguments, images): leave it out.
    local last = groups.group_start(list, #list)
    local shorter = {}
    for i = 1, last - 1 do
      shorter[i] = list[i]
    end
    list = shorter
  end
  return {}, 0
end

return M
