-- hook_keep_recent: the "keep-recent fit" of benches/engines/keep_recent.lua as a pipeline
-- `project` hook, for benches/pipeline.rs: the same walk and token rule, returning the kept
-- suffix as `messages` (the pipeline maps each one back to the session's own message).
--
-- Configuration (plugins.entries[...].config):
--   budget  number  the fit's budget in the workload's tokens (default: the call's
--                   p.lifecycle.tokenWindow.contextWindowTokens)

local M = { info = { id = "keep-recent", name = "Keep recent (workload fit, as a hook)" } }

local cache = {}

local function chars(m)
  local c = m.content
  if type(c) == "string" then
    return utf8.len(c)
  end
  local n, parts = 0, 0
  for i = 1, #c do
    local b = c[i]
    if b.type == "text" then
      n += utf8.len(b.text)
      parts += 1
    end
  end
  if parts > 1 then
    n += parts - 1
  end
  return n
end

local function tokens(m)
  local id = m.id
  local t = id and cache[id]
  if t == nil then
    t = (chars(m) + 3) // 4
    if id then
      cache[id] = t
    end
  end
  return t
end

function M.project(p)
  local msgs = p.messages
  local budget = (host.config or {}).budget or p.lifecycle.tokenWindow.contextWindowTokens
  local n = #msgs
  local used, first = 0, n + 1
  while first > 1 do
    local j, unit, open, pending = first, 0, 0, nil
    repeat
      j -= 1
      local m = msgs[j]
      unit += tokens(m)
      local role = m.role
      if role == "toolResult" then
        pending = pending or {}
        if not pending[m.toolCallId] then
          pending[m.toolCallId] = true
          open += 1
        end
      elseif role == "assistant" and open > 0 then
        local c = m.content
        for k = 1, #c do
          local b = c[k]
          if b.type == "toolCall" and pending[b.id] then
            pending[b.id] = nil
            open -= 1
          end
        end
      end
    until open == 0 or j == 1
    if used + unit > budget then
      break
    end
    used += unit
    first = j
  end
  return { messages = table.move(msgs, first, n, 1, table.create(n - first + 1)) }
end

return M
