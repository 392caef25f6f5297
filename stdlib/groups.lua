-- groups: split a message list into turns and into atomic tool groups.
--
-- Both functions return index ranges `{first = i, last = j}` (inclusive, 1-based) into the
-- list they were given, in order, covering every message exactly once. Ranges, not copies: use
-- `groups.slice(messages, g)` when you want the messages themselves.
--
--   local groups = require("groups")
--   groups.tool_groups(messages) -> atomic units: an assistant message that calls tools together
--                                   with the toolResult messages right behind it, or a single
--                                   message. Never split one when dropping messages: a call
--                                   without its result (or the reverse) is a broken context.
--   groups.turns(messages)       -> turns: each starts at a user message and runs to the next
--                                   one. Messages before the first user message (a compaction
--                                   summary, say) form a leading turn of their own.
--   groups.group_start(messages, i) -> the index where the tool group holding message i starts
--   groups.slice(messages, g)    -> the messages of range g, as a new list (same tables)
--
-- All O(n) in the number of messages (group_start: O(size of the group)).

local M = {}

local function calls_tools(m)
  local c = m.content
  if m.role ~= "assistant" or type(c) ~= "table" then
    return false
  end
  for i = 1, #c do
    if c[i].type == "toolCall" then
      return true
    end
  end
  return false
end

function M.tool_groups(messages)
  local out = {}
  local n = #messages
  local i = 1
  while i <= n do
    local first = i
    if calls_tools(messages[i]) then
      i += 1
      while i <= n and messages[i].role == "toolResult" do
        i += 1
      end
    else
      i += 1
    end
    out[#out + 1] = { first = first, last = i - 1 }
  end
  return out
end

function M.turns(messages)
  local out = {}
  local n = #messages
  local first = 1
  for i = 2, n do
    if messages[i].role == "user" then
      out[#out + 1] = { first = first, last = i - 1 }
      first = i
    end
  end
  if n > 0 then
    out[#out + 1] = { first = first, last = n }
  end
  return out
end

function M.group_start(messages, i)
  -- A toolResult belongs to the assistant message before the run of results it is in.
  local j = i
  while j > 1 and messages[j].role == "toolResult" do
    j -= 1
  end
  if j < i and not calls_tools(messages[j]) then
    -- An orphan result: it stands alone.
    return i
  end
  return j
end

function M.slice(messages, g)
  local out = {}
  for i = g.first, g.last do
    out[#out + 1] = messages[i]
  end
  return out
end

M.calls_tools = calls_tools

return M
