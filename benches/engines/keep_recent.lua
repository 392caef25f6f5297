-- keep_recent: the "keep-recent fit" of shared/data/workloads, for benches/workloads.rs.
--
-- Walk back from the newest message in units (a toolResult joins the unit of the assistant
-- message whose toolCall it answers, so a unit grows backwards until every pending call id has
-- met its call); keep each unit that still fits the budget and stop at the first that does not.
-- The result is the newest contiguous suffix, returned as the host's own messages.
--
-- Tokens are the workload's rule, not host.tokens (a CJK-weighted estimate): ceil(chars / 4) of
-- the message's text (its text blocks joined by "\n"), chars in code points; cached per message
-- id for the life of the instance.

local M = { info = { id = "keep-recent", name = "Keep recent (workload fit)", ownsCompaction = false } }

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

function M.ingest(p)
  return { ingested = false }
end

function M.assemble(p)
  local msgs, budget = p.messages, p.tokenBudget
  local n = #msgs
  local used, first = 0, n + 1
  -- The call ids still waiting for their assistant message; empty again whenever a unit ends
  -- (so one table serves every unit, as one `Set` does in the Node peer and one map in Rhai).
  local pending = {}
  while first > 1 do
    local j, unit, open = first, 0, 0
    repeat
      j -= 1
      local m = msgs[j]
      unit += tokens(m)
      local role = m.role
      if role == "toolResult" then
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
  return { messages = table.move(msgs, first, n, 1, table.create(n - first + 1)), estimatedTokens = used }
end

function M.compact(p)
  return host.delegateCompaction(p)
end

return M
