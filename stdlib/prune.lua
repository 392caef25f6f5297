-- prune: shrink old tool results without a model call (Claude Code's "microcompact", OpenClaw's
-- context pruning, Anthropic's tool-result clearing).
--
--   local prune = require("prune")
--   prune.tool_results(messages, opts) -> pruned, stats
--     1. Soft trim: every toolResult older than the last `keepTurns` turns whose text is longer
--        than `softTrimChars` keeps its first `headChars` and last `tailChars` around a marker
--        (images and other blocks are kept).
--     2. Hard clear, oldest first: when `budget` is given and the list is still over it, old
--        tool results are replaced by `placeholder` one at a time until it fits (or none is
--        left); with `hardClear = true` every old tool result is cleared.
--     The last `keepTurns` turns are never touched. Messages that do not change are returned
--     as the very same tables; only changed ones are copies (same id).
--     opts (all optional): keepTurns = 2, softTrimChars = 4000, headChars = 1500,
--       tailChars = 1500, placeholder = "[Old tool result content cleared]", budget = nil,
--       hardClear = false. Sizes in characters are UTF-8 bytes.
--     stats = { trimmed = n, cleared = n, tokens = total after pruning (only when `budget` is
--       given, because it costs a host.tokens call per message) }
--   prune.protected_from(messages, keep_turns) -> index of the first message of the last
--       `keep_turns` turns (#messages + 1 when keep_turns is 0)
--
-- O(n) in the number of messages plus the size of the results it trims.

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


M.DEFAULT_PLACEHOLDER = "[Old tool result content cleared]"

function M.protected_from(messages, keep_turns)
  local n = #messages
  if keep_turns <= 0 then
    return n + 1
  end
  local seen = 0
  for i = n, 1, -1 do
    if messages[i].role == "user" then
      seen += 1
      if seen == keep_turns then
        return i
      end
    end
  end
  return 1
end

local function cleared(m, placeholder)
  local out = msg.copy(m)
  out.content = { { type = "text", text = placeholder } }
  return out
end

function M.tool_results(messages, opts)
  opts = opts or {}
  local keep_turns = opts.keepTurns or 2
  local soft = opts.softTrimChars or 4000
  local head = opts.headChars or 1500
  local tail = opts.tailChars or 1500
  local placeholder = opts.placeholder or M.DEFAULT_PLACEHOLDER
  local stats = { trimmed = 0, cleared = 0 }

  local n = #messages
  local limit = M.protected_from(messages, keep_turns) - 1
  local out = copy_list(messages)
  local candidates = {} -- indexes of old tool results, oldest first

  -- 1. Soft trim.
  for i = 1, limit do
    local m = out[i]
    if m.role == "toolResult" then
      local text = msg.text(m)
      if text ~= placeholder then
        candidates[#candidates + 1] = i
        if #text > soft and #text > head + tail then
          local omitted = #text - head - tail
          local trimmed = msg.head(text, head)
            .. "\n[... " .. omitted .. " bytes of tool output trimmed ...]\n"
            .. msg.tail(text, tail)
          out[i] = msg.with_text(m, trimmed)
          stats.trimmed += 1
        end
      end
    end
  end

  -- 2. Hard clear, oldest first.
  if opts.hardClear then
    for _, i in ipairs(candidates) do
      out[i] = cleared(out[i], placeholder)
      stats.cleared += 1
    end
  end
  if opts.budget then
    local total = 0
    for i = 1, n do
      total += host.tokens(out[i])
    end
    for _, i in ipairs(candidates) do
      if total <= opts.budget then
        break
      end
      if msg.text(out[i]) ~= placeholder then
        local before = host.tokens(out[i])
        out[i] = cleared(out[i], placeholder)
        total += host.tokens(out[i]) - before
        stats.cleared += 1
      end
    end
    stats.tokens = total
  end
  return out, stats
end

return M
