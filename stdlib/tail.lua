-- tail: the protected fresh tail, the part of the context an engine always sends.
--
--   local tail = require("tail")
--   tail.fresh_tail(messages, opts) -> the index where the fresh tail starts (#messages + 1 when
--       the list is empty). The tail always holds the newest user message and everything after
--       it (the assistant's tool calls and all their results in this turn). With no user
--       message at all it is the newest tool group.
--       opts.minMessages (default 0): stretch the tail back to hold at least this many messages
--       (lossless-claw's freshTailCount); the start is then moved back to a tool group's first
--       message, so a tail never starts with a toolResult.
--   tail.tokens(messages, start) -> tokens of messages[start..#messages] (host.tokens)
--
-- Cost: O(size of the tail), not O(#messages).

local groups = require("groups")

local M = {}

function M.fresh_tail(messages, opts)
  local n = #messages
  if n == 0 then
    return 1
  end
  local min_messages = (opts and opts.minMessages) or 0
  local start = nil
  for i = n, 1, -1 do
    if messages[i].role == "user" then
      start = i
      break
    end
  end
  if start == nil then
    start = groups.group_start(messages, n)
  end
  if n - start + 1 < min_messages then
    start = math.max(1, n - min_messages + 1)
    start = groups.group_start(messages, start)
  end
  return start
end

function M.tokens(messages, start)
  local total = 0
  for i = start, #messages do
    total += host.tokens(messages[i])
  end
  return total
end

return M
