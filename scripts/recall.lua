-- recall: a summary DAG that brings back the original messages the request needs again, after
-- lossless-claw (its summary DAG and its recall tools, in one script file).
--
-- The summaries are `hierarchical`'s: the fresh tail (the newest user message and its tool
-- replies, stretched to at least `freshTailMessages` messages) and the most recent older
-- messages are sent verbatim; when the verbatim part outgrows its room, its oldest messages are
-- condensed, a chunk of about `leafChunkTokens` at a time (whole tool groups), into *leaf*
-- summaries (depth 0) with `host.summarize`, and `fanout` summaries of one depth fold into one a
-- level up (up to `maxDepth`; at the top depth the oldest fold into one of the same depth). A
-- fold never grows: its summary gets at most the tokens of what it folds. When all summaries
-- outgrow `summaryShare` of the budget, folding is forced and, as a last resort, the text cut.
-- The summaries live in `p.state` and reach the model as `systemPromptAddition`. The DAG
-- itself (leaves, folds, the size checks, compaction) is the stdlib's `dag` module, shared with
-- `scripts/hierarchical.lua`; recall's share of the budget is its `reserve`.
--
-- Recall: a summary keeps the gist, not every line. The host keeps every original message, so
-- on each `assemble` the request (the newest user message) is searched for with `host.search`
-- among the messages no longer sent verbatim (condensed here, or compacted before). The few
-- best hits that share an identifier with the request (a matched term with a joining character
-- or both letters and digits: a path such as `src/foo.rs`, a record id, `#123`, `ERR_X`,
-- `E0502`; plain words and numbers are not enough) are fetched with `host.fetch` and added
-- after the summaries, each as `<recalled id role>` with its original text, cut to its share of
-- `recallShare` of the budget. Nothing of recall is kept in the state: it is decided afresh
-- from the request on every call.
--
-- Compaction: `ownsCompaction = true`, as `hierarchical`: `compact` condenses everything before
-- the fresh tail and returns the rendered summaries as the compaction summary, with the tail's
-- first message as `firstKeptEntryId`.
--
-- Configuration (plugins.entries["recall"].config), all optional; token sizes default to a
-- fraction of the turn's budget:
--   freshTailMessages  number  default 8                       messages always sent verbatim
--   fanout             number  default 4                       summaries per fold
--   summaryShare       number  default 0.25                    budget share of all summaries
--   recallShare        number  default 0.1                     budget share of recalled messages
--   maxRecalled        number  default 3                       recalled messages per call
--   leafChunkTokens    number  default min(20000, budget/4)    tokens condensed per leaf
--   leafTokens         number  default min(2400, budget/16)    size of a leaf summary
--   condensedTokens    number  default min(2000, budget/10)    size of a folded summary
--   maxDepth           number  default 3                       deepest summary level

local dag = require("dag")
local msg = require("msg")

return function(ctx)
  local config = ctx.config or {}
  local recall_share = config.recallShare or 0.1
  local max_recalled = math.max(0, config.maxRecalled or 3)

  local M = {
    info = {
      id = "recall",
      name = "Summary DAG with recall",
      version = "1.0.0",
      ownsCompaction = true,
    },
  }

  -- The DAG's settings, with recall's share of the budget kept out of its room.
  local function settings(budget)
    local s = dag.settings(config, budget)
    s.reserve = budget * recall_share // 1
    return s
  end

  -- Whether a search term names something (a path, a record id, an issue, an error code) rather
  -- than being a plain word or number: it has a joining character, or letters and digits both.
  local function names_something(term)
    if term:find("[_%./#:@~+%-]") then
      return true
    end
    return term:find("%d") ~= nil and term:find("%a") ~= nil
  end

  -- The original messages the request most likely needs again, rendered for the system prompt
  -- within `room` tokens: stored messages before `before_id` (no longer sent verbatim) that
  -- share an identifier with the request, best first.
  local function recall(request, before_id, room)
    if max_recalled == 0 or room < 32 then
      return ""
    end
    local query = msg.text(request)
    if query == "" then
      return ""
    end
    local hits = host.search(query, {
      limit = max_recalled * 3,
      roles = { "user", "assistant", "toolResult" },
      before = before_id,
    })
    local ids = {}
    for _, hit in ipairs(hits) do
      local named = false
      for _, term in ipairs(hit.matched) do
        if names_something(term) then
          named = true
          break
        end
      end
      if named and hit.id ~= request.id and #ids < max_recalled then
        ids[#ids + 1] = hit.id
      end
    end
    if #ids == 0 then
      return ""
    end
    local header = "Recalled from earlier in this session: original messages that share an identifier with the request."
    local per = (room - host.tokens(header)) // #ids
    local parts = { header }
    for _, m in ipairs(host.fetch(ids)) do
      local open = '<recalled id="' .. m.id .. '" role="' .. m.role .. '">\n'
      local cap = per - host.tokens(open .. "\n</recalled>")
      local text = msg.text(m)
      if text ~= "" and cap >= 8 then
        parts[#parts + 1] = open .. msg.trim_text(text, cap) .. "\n</recalled>"
      end
    end
    if #parts == 1 then
      return ""
    end
    return dag.bounded(table.concat(parts, "\n"), room)
  end

  function M.ingest(p)
    return { ingested = false }
  end

  function M.assemble(p)
    local messages, budget = p.messages, p.tokenBudget
    local s = settings(budget)
    local r = dag.assemble(p.state, messages, budget, s)
    local result, request, start, used = r.result, r.request, r.start, r.used
    -- Recall, within its share and what is left of the budget.
    if request and start <= #messages then
      local addition = result.systemPromptAddition or ""
      local add_tokens = result.estimatedTokens - used
      local room_left = math.min(s.reserve, budget - used - add_tokens)
      local recalled = recall(messages[request], messages[start].id, room_left)
      if recalled ~= "" then
        local joined = recalled
        if addition ~= "" then
          joined = addition .. "\n\n" .. recalled
        end
        local joined_tokens = host.tokens(joined)
        if used + joined_tokens <= budget then
          result.systemPromptAddition = joined
          result.estimatedTokens = used + joined_tokens
        end
      end
    end
    return result
  end

  function M.compact(p)
    return dag.compact(p.state, p, settings(p.tokenBudget)).result
  end

  return M
end
