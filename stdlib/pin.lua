-- pin: messages an engine must keep whatever the budget pressure.
--
-- A message is pinned when its id was pinned with `pin.pin(state, id)` (the set lives in
-- `state.pins`, so it persists with the session), or when it is a user message whose text
-- contains the marker `[pin]`.
--
--   local pin = require("pin")
--   pin.MARKER                     -> "[pin]"
--   pin.pin(state, id)             -> pins a message id (no-op for nil)
--   pin.unpin(state, id)           -> removes it
--   pin.is_pinned(m, state)        -> whether m is pinned (by id or by marker)
--   pin.partition(messages, state) -> pinned, rest: two lists in original order (same tables).
--       Works on whole tool groups: when any message of a group is pinned, the whole group
--       (the call and all its results) goes to `pinned`, so both lists stay well paired.
--
-- O(n) in the number of messages.

local groups = require("groups")
local msg = require("msg")

local M = {}

M.MARKER = "[pin]"

function M.pin(state, id)
  if id == nil then
    return
  end
  state.pins = state.pins or {}
  state.pins[id] = true
end

function M.unpin(state, id)
  if id ~= nil and state.pins then
    state.pins[id] = nil
  end
end

function M.is_pinned(m, state)
  if m.id ~= nil and state and state.pins and state.pins[m.id] then
    return true
  end
  if m.role == "user" then
    return string.find(msg.text(m), M.MARKER, 1, true) ~= nil
  end
  return false
end

function M.partition(messages, state)
  local pinned, rest = {}, {}
  for _, g in ipairs(groups.tool_groups(messages)) do
    local any = false
    for i = g.first, g.last do
      if M.is_pinned(messages[i], state) then
        any = true
        break
      end
    end
    local into = any and pinned or rest
    for i = g.first, g.last do
      into[#into + 1] = messages[i]
    end
  end
  return pinned, rest
end

return M
