-- compaction-planner: a pipeline hook that plans each compaction itself. It keeps the newest
-- turns that fit a share of the window verbatim and has the host's summarizer fold everything
-- older (with the previous summary) into one summary. The host persists the plan: the summary
-- is stored with the first kept message as its `firstKeptEntryId`, and the session goes on
-- from that summary plus the kept messages.
--
-- Policy, for a window of W tokens (`p.tokenWindow.contextWindowTokens`):
--   * the history budget H = W * maxHistoryShare is what the summary and the kept messages may
--     take together after the compaction, so the turns that follow have room;
--   * the summary gets at most H * summaryShare tokens (`host.summarize`'s maxTokens);
--   * kept verbatim: whole tool groups (a tool call is never cut from its results), newest
--     first, while they fit in H less the summary's share; the newest group always stays;
--   * the turn in progress (from the newest user message on) is kept whole when it fits half
--     the window, as the host requires of every compaction;
--   * summarized: everything before the first kept message and after the previous summary,
--     which is folded in as `previousSummary` rather than summarized again. The host's
--     summarizer keeps identifiers (UUIDs, hashes, paths, URLs) verbatim.
-- When nothing older than what is kept is left, the planner returns no plan and the host's
-- built-in compaction decides. The first plan of the pipeline wins, so list this hook before
-- any other planner.
--
-- Configuration (plugins.entries["compaction-planner"].config), all optional:
--   maxHistoryShare  number  default 0.5   share of the window for the summary and kept turns
--   summaryShare     number  default 0.25  share of that history budget for the summary

local groups = require("groups")

local M = {
  info = { id = "compaction-planner", name = "Compaction planner", version = "1.0.0" },
}

-- Tokens of messages[first..last], by the host's counter (cached per message).
local function tokens(messages, first, last)
  local t = 0
  for i = first, last do
    t += host.tokens(messages[i])
  end
  return t
end

function M.compactionPlan(p)
  local config = host.config or {}
  local messages = p.messages
  local n = #messages
  local window = p.tokenWindow.contextWindowTokens
  local history = window * (config.maxHistoryShare or 0.5) // 1
  local summary_max = math.max(32, history * (config.summaryShare or 0.25) // 1)

  -- An earlier summary stays first until this one replaces it: folded in, not summarized.
  local from, previous = 1, nil
  if n > 0 and messages[1].role == "compactionSummary" then
    from, previous = 2, messages[1].summary
  end

  -- Kept verbatim: whole tool groups, newest first, while they fit what the summary leaves.
  local room = history - summary_max
  local ranges = groups.tool_groups(messages)
  local keep_from, kept = n + 1, 0
  for g = #ranges, 1, -1 do
    local r = ranges[g]
    if r.first < from then
      break
    end
    local t = tokens(messages, r.first, r.last)
    if kept > 0 and kept + t > room then
      break
    end
    keep_from, kept = r.first, kept + t
  end

  -- The turn in progress stays whole when it fits half the window.
  local request = nil
  for i = n, from, -1 do
    if messages[i].role == "user" then
      request = i
      break
    end
  end
  if request ~= nil and request < keep_from and tokens(messages, request, n) <= window // 2 then
    kept += tokens(messages, request, keep_from - 1)
    keep_from = request
  end

  if keep_from <= from then
    return nil
  end
  local span = groups.slice(messages, { first = from, last = keep_from - 1 })
  local summary = host.summarize(span, {
    maxTokens = summary_max,
    previousSummary = previous,
    instructions = p.customInstructions,
  })
  return {
    plan = {
      ok = true,
      compacted = true,
      result = {
        summary = summary.text,
        firstKeptEntryId = messages[keep_from].id,
        tokensBefore = p.currentTokenCount or tokens(messages, 1, n),
        tokensAfter = summary.tokens + kept,
        details = {
          planner = "compaction-planner",
          summarizedMessages = #span,
          keptMessages = n - keep_from + 1,
          historyBudget = history,
          summaryBudget = summary_max,
        },
      },
    },
  }
end

return M
