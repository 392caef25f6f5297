-- Messages are frozen: change a copy. Here every assistant "thinking" block is dropped.
local fit = require("fit")
local msg = require("msg")

local M = {
  info = { id = "msg-helpers", name = "Message helpers", ownsCompaction = false },
}

local function without_thinking(m)
  if not msg.is_assistant(m) or type(m.content) ~= "table" then
    return m -- unchanged: the original table, which costs nothing to return
  end
  local has = false
  for _, b in ipairs(m.content) do
    if b.type == "thinking" then
      has = true
    end
  end
  if not has then
    return m
  end
  local copy = msg.copy(m) -- same id, unfrozen
  local blocks = {}
  for _, b in ipairs(copy.content) do
    if b.type ~= "thinking" then
      blocks[#blocks + 1] = b
    end
  end
  if #blocks == 0 then
    return m -- nothing but thinking: keep it whole
  end
  copy.content = blocks
  return copy
end

function M.ingest(p)
  return { ingested = false }
end

function M.assemble(p)
  local out = {}
  for i = 1, #p.messages do
    out[i] = without_thinking(p.messages[i])
  end
  local kept, tokens = fit.newest_first(out, p.tokenBudget)
  return { messages = kept, estimatedTokens = tokens }
end

function M.compact(p)
  return host.delegateCompaction(p)
end

return M
