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
-- The summaries live in `p.state` and reach the model as `systemPromptAddition`.
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

local groups = require("groups")
local fit = require("fit")
local msg = require("msg")
local tail = require("tail")

return function(ctx)
  local config = ctx.config or {}
  local fanout = math.max(2, config.fanout or 4)
  local summary_share = config.summaryShare or 0.25
  local min_tail = config.freshTailMessages or 8
  local max_depth = math.max(1, config.maxDepth or 3)
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

  local function sizes(budget)
    return {
      chunk = config.leafChunkTokens or math.max(256, math.min(20000, budget // 4)),
      leaf = config.leafTokens or math.max(64, math.min(2400, budget // 16)),
      condensed = config.condensedTokens or math.max(64, math.min(2000, budget // 10)),
      cap = budget * summary_share // 1,
      recall = budget * recall_share // 1,
    }
  end

  -- state.levels[d + 1] holds the depth-d summaries, oldest first; higher depths are older.
  local function levels(state)
    state.levels = state.levels or {}
    return state.levels
  end

  local function summarize_nodes(nodes, depth, max_tokens)
    local ms, count, input = {}, 0, 0
    for i, node in ipairs(nodes) do
      -- As summaries, so the summarizer folds their sections instead of reading them as asks.
      ms[i] = { role = "compactionSummary", summary = node.text, tokensBefore = 0 }
      count += node.count
      input += host.tokens(node.text)
    end
    -- A fold never grows: at most the tokens of what it folds.
    local s = host.summarize(ms, { maxTokens = math.max(1, math.min(max_tokens, input)) })
    return { depth = depth, text = s.text, count = count, first = nodes[1].first, last = nodes[#nodes].last }
  end

  -- Folds the oldest k summaries of level lv into one summary on level lv + 1, or, at the
  -- deepest level, into one summary that stays the oldest of that level.
  local function fold(state, lv, k, max_tokens)
    local L = levels(state)
    local up = math.min(lv + 1, max_depth + 1)
    local take, rest = {}, {}
    for i, node in ipairs(L[lv]) do
      if i <= k then
        take[#take + 1] = node
      else
        rest[#rest + 1] = node
      end
    end
    L[lv] = rest
    L[up] = L[up] or {}
    local node = summarize_nodes(take, up - 1, max_tokens)
    if up == lv then
      table.insert(L[up], 1, node)
    else
      table.insert(L[up], node)
    end
  end

  local function render(state)
    local L = levels(state)
    local parts, nodes, covered = {}, 0, 0
    for lv = #L, 1, -1 do
      for _, node in ipairs(L[lv]) do
        nodes += 1
        covered += node.count
        parts[#parts + 1] = '<summary depth="' .. node.depth .. '" messages="' .. node.count
          .. '" first="' .. tostring(node.first) .. '" last="' .. tostring(node.last) .. '">\n'
          .. node.text .. "\n</summary>"
      end
    end
    if nodes == 0 then
      return ""
    end
    return "Condensed history: " .. covered .. " earlier messages are condensed into " .. nodes
      .. " summaries below, oldest first (a higher depth is older and coarser).\n"
      .. table.concat(parts, "\n")
  end

  -- Regular folding, then forced folding until the summaries fit their share of the budget.
  local function relieve(state, sz)
    local L = levels(state)
    local lv = 1
    while lv <= #L do
      while #L[lv] >= fanout do
        fold(state, lv, fanout, sz.condensed)
      end
      lv += 1
    end
    while host.tokens(render(state)) > sz.cap do
      local crowded = nil
      for i = 1, #L do
        if #L[i] >= 2 then
          crowded = i
          break
        end
      end
      if crowded then
        fold(state, crowded, 2, sz.condensed)
      else
        -- At most one summary per level: fold them all, oldest first, into one new top node.
        local all = {}
        for i = #L, 1, -1 do
          for _, node in ipairs(L[i]) do
            all[#all + 1] = node
          end
        end
        if #all <= 1 then
          break
        end
        local top_lv = math.min(#L + 1, max_depth + 1)
        local top = summarize_nodes(all, top_lv - 1, sz.condensed)
        for i = 1, #L do
          L[i] = {}
        end
        L[top_lv] = { top }
      end
    end
  end

  -- The last index of the tool group starting at i, not past `to`.
  local function group_end(messages, i, to)
    local e = i
    if groups.calls_tools(messages[i]) then
      while e + 1 <= to and messages[e + 1].role == "toolResult" do
        e += 1
      end
    end
    return e
  end

  -- Condenses messages[from..to] (whole groups) into leaves of about sz.chunk tokens each.
  local function condense(state, messages, from, to, sz)
    local L = levels(state)
    L[1] = L[1] or {}
    local i = from
    while i <= to do
      local j, acc = i, 0
      repeat
        local e = group_end(messages, j, to)
        for x = j, e do
          acc += host.tokens(messages[x])
        end
        j = e + 1
      until j > to or acc >= sz.chunk
      -- A leaf never grows either; a few dozen tokens are kept as their text.
      local text
      if acc < 64 then
        local lines = {}
        for x = i, j - 1 do
          local said = msg.text(messages[x])
          if said ~= "" then
            lines[#lines + 1] = messages[x].role .. ": " .. said
          end
        end
        text = msg.trim_text(table.concat(lines, "\n"), math.max(1, acc))
      else
        local slice = groups.slice(messages, { first = i, last = j - 1 })
        text = host.summarize(slice, { maxTokens = math.min(sz.leaf, acc) }).text
      end
      table.insert(L[1], { depth = 0, text = text, count = j - i, first = messages[i].id, last = messages[j - 1].id })
      state.through = messages[j - 1].id
      state.throughAt = j - 1
      while #L[1] >= fanout do
        fold(state, 1, fanout, sz.condensed)
      end
      i = j
    end
  end

  -- Skips compaction summaries at the start of the context; a summary this engine did not
  -- write becomes the oldest node. Returns the index of the first other message.
  local function skip_summaries(state, messages, t)
    local i = 1
    while i < t and messages[i].role == "compactionSummary" do
      local m = messages[i]
      state.seen = state.seen or {}
      if m.id ~= nil and not state.seen[m.id] then
        state.seen[m.id] = true
        if state.ownCompaction then
          state.ownCompaction = nil
        else
          local L = levels(state)
          local top = math.max(1, #L)
          L[top] = L[top] or {}
          table.insert(L[top], 1, { depth = top - 1, text = m.summary or "", count = 0, first = m.id, last = m.id })
        end
      end
      i += 1
    end
    return i
  end

  local function find(messages, id, hint, from, to)
    if id == nil then
      return nil
    end
    if hint and hint >= from and hint <= to and messages[hint].id == id then
      return hint
    end
    for i = to, from, -1 do
      if messages[i].id == id then
        return i
      end
    end
    return nil
  end

  -- The first message not yet condensed (the fresh tail, which starts at t, is moved past
  -- anything already condensed).
  local function first_raw(state, messages, t)
    local start = skip_summaries(state, messages, t)
    local at = find(messages, state.through, state.throughAt, start, #messages)
    if at then
      start = at + 1
    end
    return start
  end

  -- Where the fresh tail starts, and its request: the tail holds at most three quarters of
  -- what the summaries leave, so a long tool loop is condensed from its oldest groups on (the
  -- newest group always stays). Returns the tail's start and the request's index, or nil.
  local function fresh(state, messages, budget, sz)
    local n = #messages
    local t = tail.fresh_tail(messages, { minMessages = min_tail })
    local request = nil
    for i = n, t, -1 do
      if messages[i].role == "user" then
        request = i
        break
      end
    end
    local limit = (budget - sz.cap - sz.recall) * 3 // 4
    local tokens = tail.tokens(messages, t)
    while tokens > limit do
      local e = group_end(messages, t, n)
      if e >= n then
        break
      end
      for x = t, e do
        tokens -= host.tokens(messages[x])
      end
      t = e + 1
    end
    local start = first_raw(state, messages, t)
    return math.max(t, start), request, start
  end

  local function bounded(text, cap)
    if text ~= "" and host.tokens(text) > cap then
      return msg.trim_text(text, cap)
    end
    return text
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
    return bounded(table.concat(parts, "\n"), room)
  end

  function M.ingest(p)
    return { ingested = false }
  end

  function M.assemble(p)
    local messages, budget, state = p.messages, p.tokenBudget, p.state
    local n = #messages
    local sz = sizes(budget)
    local t, request, start = fresh(state, messages, budget, sz)
    local tail_tokens = tail.tokens(messages, t)

    -- Condense the oldest verbatim messages when they outgrow their room, a chunk at a time.
    local room = budget - sz.cap - sz.recall - tail_tokens
    local raw = 0
    for i = start, t - 1 do
      raw += host.tokens(messages[i])
    end
    if raw > room then
      local target = math.max(0, room - sz.chunk)
      local cut = start
      while cut < t and raw > target do
        local e = group_end(messages, cut, t - 1)
        for x = cut, e do
          raw -= host.tokens(messages[x])
        end
        cut = e + 1
      end
      condense(state, messages, start, cut - 1, sz)
      start = cut
    end
    relieve(state, sz)

    local addition = bounded(render(state), sz.cap)
    local add_tokens = addition ~= "" and host.tokens(addition) or 0
    -- The request of a condensed tool loop is still sent, before what is left of its turn.
    local req_tokens = 0
    if request and request < start then
      req_tokens = host.tokens(messages[request])
    end
    local out, used
    if raw + tail_tokens + add_tokens + req_tokens <= budget then
      out, used = groups.slice(messages, { first = start, last = n }), raw + tail_tokens + req_tokens
      if req_tokens > 0 then
        table.insert(out, 1, messages[request])
      end
    else
      -- The fresh tail alone is too big: squeeze (big results trimmed, oldest groups dropped).
      out, used = fit.squeeze(groups.slice(messages, { first = start, last = n }), budget - add_tokens)
    end
    -- Recall, within its share and what is left of the budget.
    if request and start <= n then
      local room_left = math.min(sz.recall, budget - used - add_tokens)
      local recalled = recall(messages[request], messages[start].id, room_left)
      if recalled ~= "" then
        local joined = recalled
        if addition ~= "" then
          joined = addition .. "\n\n" .. recalled
        end
        local joined_tokens = host.tokens(joined)
        if used + joined_tokens <= budget then
          addition, add_tokens = joined, joined_tokens
        end
      end
    end
    local result = { messages = out, estimatedTokens = used + add_tokens }
    if addition ~= "" then
      result.systemPromptAddition = addition
    end
    return result
  end

  function M.compact(p)
    local messages, state = p.messages, p.state
    local sz = sizes(p.tokenBudget)
    local t, _, start = fresh(state, messages, p.tokenBudget, sz)
    if start < t then
      condense(state, messages, start, t - 1, sz)
    end
    relieve(state, sz)
    local summary = bounded(render(state), sz.cap)
    local only_own_summary = t == 2 and messages[1].role == "compactionSummary"
    if t <= 1 or only_own_summary or summary == "" then
      return { ok = true, compacted = false, reason = "nothing to compact: only the fresh tail is left" }
    end
    state.ownCompaction = true
    return {
      ok = true,
      compacted = true,
      result = {
        summary = summary,
        firstKeptEntryId = messages[t].id,
        tokensBefore = p.currentTokenCount,
        tokensAfter = host.tokens(summary) + tail.tokens(messages, t),
      },
    }
  end

  return M
end
