-- pinned-facts: a pipeline hook that contributes the facts its config pins to every model call,
-- appended to the system prompt.
--
-- Configuration (plugins.entries["pinned-facts"].config):
--   facts     list of strings   the facts, in order
--   priority  number            default 10: the blocks' priority (kept over lower ones when
--                               contributions exceed their share of the budget)

local M = {
  info = { id = "pinned-facts", name = "Pinned facts", version = "1.0.0" },
}

function M.collect(p)
  local config = host.config or {}
  local facts = config.facts or {}
  if #facts == 0 then
    return nil
  end
  local blocks = {}
  for i = 1, #facts do
    blocks[#blocks + 1] = { id = "fact-" .. i, text = "Pinned fact: " .. facts[i], priority = config.priority or 10 }
  end
  return { appendSystemPrompt = blocks, pluginData = { pinnedFacts = #facts } }
end

return M
