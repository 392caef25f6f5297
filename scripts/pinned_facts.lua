-- pinned_facts: pinned messages survive everything; what falls out of the window is kept as a
-- running summary.
--
-- Policy:
--   * A user message containing "[pin]" (or any message whose id was pinned with
--     `pin.pin(state, id)`) becomes a pinned fact when it is ingested. Facts live in `p.state`,
--     so they outlive compaction, reloads and restarts.
--   * When the whole session fits, it is sent unchanged, plus any facts whose messages are no
--     longer in the session (compacted away), as `systemPromptAddition`.
--   * Otherwise the fresh tail (newest user message and its tool replies) is sent, older messages
--     fill the budget newest first (whole tool groups), and every message that falls out of the
--     window is folded into a running summary (`host.summarize` with the previous summary), kept
--     in `p.state`. The `systemPromptAddition` then holds the facts not in the window and the
--     running summary. The window plus the addition always fit `p.tokenBudget`.
--
-- Compaction: `ownsCompaction = false`; `compact` delegates to the host's built-in compaction.
--
-- Configuration (plugins.entries["pinned-facts"].config), all optional:
--   factsShare    number  default 0.2    most of the budget the pinned facts may take
--   summaryShare  number  default 0.15   most of the budget the running summary may take
--   maxFactChars  number  default 2000   longest text kept per fact (UTF-8 bytes)

local fit = require("fit")
local groups = require("groups")
local msg = require("msg")
local pin = require("pin")
local tail = require("tail")

return function(ctx)
  local config = ctx.config or {}
  local facts_share = config.factsShare or 0.2
  local summary_share = config.summaryShare or 0.15
  local max_fact_chars = config.maxFactChars or 2000

  local M = {
    info = {
      id = "pinned-facts",
      name = "Pinned facts and running summary",
      version = "1.0.0",
      ownsCompaction = false,
    },
  }

  local function remember(state, m)
    if m.id == nil or not pin.is_pinned(m, state) then
      return false
    end
    state.factIds = state.factIds or {}
    if state.factIds[m.id] then
      return false
    end
    state.factIds[m.id] = true
    state.facts = state.facts or {}
    local text = string.gsub(msg.text(m), "%[pin%]", "")
    state.facts[#state.facts + 1] = { id = m.id, text = msg.head(text, max_fact_chars) }
    return true
  end

  function M.ingest(p)
    return { ingested = remember(p.state, p.message) }
  end

  -- "Pinned facts" text for the facts whose messages are not in `present` (a set of ids),
  -- newest first up to `cap` tokens, shown oldest first.
  local function render_facts(state, present, cap)
    local facts = state.facts or {}
    local header = "Pinned facts (the user asked to keep these):\n"
    local used = host.tokens(header)
    local first = #facts + 1
    for i = #facts, 1, -1 do
      local f = facts[i]
      if not present[f.id] then
        local c = host.tokens("- " .. f.text .. "\n")
        if used + c > cap then
          break
        end
        used += c
        first = i
      end
    end
    local lines = {}
    for i = first, #facts do
      if not present[facts[i].id] then
        lines[#lines + 1] = "- " .. facts[i].text
      end
    end
    if #lines == 0 then
      return ""
    end
    return header .. table.concat(lines, "\n")
  end

  local function join(a, b)
    if a == "" then
      return b
    elseif b == "" then
      return a
    end
    return a .. "\n\n" .. b
  end

  local function result(messages, used, addition)
    if addition == "" then
      return { messages = messages, estimatedTokens = used }
    end
    return { messages = messages, estimatedTokens = used + host.tokens(addition), systemPromptAddition = addition }
  end

  -- Index of the message with `id`, trying the remembered index first.
  local function find(messages, id, hint)
    if id == nil then
      return nil
    end
    if hint and messages[hint] and messages[hint].id == id then
      return hint
    end
    for i = #messages, 1, -1 do
      if messages[i].id == id then
        return i
      end
    end
    return nil
  end

  function M.assemble(p)
    local messages, budget, state = p.messages, p.tokenBudget, p.state
    local n = #messages
    local facts_cap = budget * facts_share // 1
    local summary_cap = budget * summary_share // 1

    -- 1. Everything fits: send it as is, with the facts that were compacted away.
    local present = {}
    if state.facts and #state.facts > 0 then
      for i = 1, n do
        local id = messages[i].id
        if id then
          present[id] = true
        end
      end
    end
    local total = host.tokens(messages)
    local facts = render_facts(state, present, facts_cap)
    if total + (facts ~= "" and host.tokens(facts) or 0) <= budget then
      return result(messages, total, facts)
    end

    -- 2. If the tail cannot fit beside the facts and a summary, squeeze the whole context.
    local t = tail.fresh_tail(messages)
    local tail_tokens = tail.tokens(messages, t)
    local all_facts = render_facts(state, {}, facts_cap)
    local facts_reserve = all_facts ~= "" and host.tokens(all_facts) or 0
    if t == 1 or tail_tokens + facts_reserve + summary_cap > budget then
      if facts_reserve > budget // 4 then
        all_facts = msg.trim_text(all_facts, budget // 4)
        facts_reserve = host.tokens(all_facts)
      end
      local out, used = fit.squeeze(messages, budget - facts_reserve)
      return result(out, used, all_facts)
    end

    -- 3. Fill newest first, leaving room for the facts and a summary.
    local kept, used = fit.newest_first(messages, budget, { reserve = tail_tokens + facts_reserve + summary_cap, to = t - 1 })
    local k = t - #kept -- first message in the window
    if k > 1 then
      local at = find(messages, state.summarizedThrough, state.summarizedAt)
      local from = at and at + 1 or 1
      if from <= k - 1 then
        local s = host.summarize(groups.slice(messages, { first = from, last = k - 1 }), {
          maxTokens = math.max(16, summary_cap - 16),
          previousSummary = state.summary,
        })
        state.summary = s.text
        state.summarizedThrough = messages[k - 1].id
        state.summarizedAt = k - 1
      end
    end

    local window = {}
    present = {}
    for i = k, n do
      window[#window + 1] = messages[i]
      if messages[i].id then
        present[messages[i].id] = true
      end
    end
    local summary = ""
    if state.summary and k > 1 then
      summary = "Summary of the earlier conversation:\n" .. state.summary
    end
    local addition = join(render_facts(state, present, facts_cap), summary)
    local room = budget - used - tail_tokens
    if addition ~= "" and host.tokens(addition) > room then
      addition = msg.trim_text(addition, room)
    end
    return result(window, used + tail_tokens, addition)
  end

  function M.compact(p)
    return host.delegateCompaction(p)
  end

  return M
end
