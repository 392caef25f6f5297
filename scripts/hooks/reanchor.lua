-- reanchor: a pipeline hook that re-states the rules its config gives right before the user
-- turn once the session has been compacted (a summary may have dropped them).
--
-- Configuration (plugins.entries["reanchor"].config):
--   rules  string   the text re-injected after a compaction

local M = {
  info = { id = "reanchor", name = "Re-anchor after compaction", version = "1.0.0", priority = 5 },
}

function M.collect(p)
  local rules = (host.config or {}).rules
  if rules == nil then
    return nil
  end
  for i = 1, #p.messages do
    if p.messages[i].role == "compactionSummary" then
      return { prependContext = { { id = "rules", text = rules, priority = 20 } } }
    end
  end
  return nil
end

return M
