-- dag: a summary DAG, after lossless-claw: the oldest messages condensed into leaf summaries,
-- leaves folded into summaries a level up as they pile up, all of them kept within a share of
-- the budget and sent as the `systemPromptAddition`. `scripts/hierarchical.lua` is this module
-- and nothing else; `scripts/recall.lua` adds recall of original messages to it.
--
-- Policy: the fresh tail (the newest user message and its tool replies, stretched to at least
-- `freshTailMessages` messages) and the most recent older messages are sent verbatim. When the
-- verbatim part outgrows its room, its oldest messages are condensed, about `chunk` tokens at a
-- time (whole tool groups), into leaf summaries (depth 0) with `host.summarize`. When `fanout`
-- summaries pile up at one depth, the oldest of them fold into one summary a level up (up to
-- `maxDepth`; at the top depth the oldest fold into one of the same depth). A fold never grows:
-- its summary gets at most the tokens of what it folds (a leaf, at most those of its messages;
-- a leaf of under 64 tokens keeps their text). When all summaries together outgrow `cap`,
-- folding is forced (two at a time, then everything into one), and as a last resort the text
-- is cut, so the budget always holds. A fresh tail larger than three quarters of what the
-- summaries (and `reserve`) leave is condensed too, oldest tool groups first; the request that
-- started it is still sent verbatim.
--
-- The DAG lives in the engine's state: `state.levels[d + 1]` holds the depth-d summaries
-- (`{depth, text, count, first, last}`: the message count and the id range they cover), oldest
-- first, higher depths older; `state.through` / `state.throughAt` name the last condensed
-- message; `state.seen` the compaction summaries already met; `state.ownCompaction` marks a
-- compaction this module answered, so the next assembly does not count its summary twice. A
-- summary written by anyone else becomes the oldest node.
--
--   local dag = require("dag")
--   dag.settings(config, budget) -> s: the engine's configuration with defaults, token sizes
--       from the turn's budget: freshTailMessages (8), fanout (4, at least 2), maxDepth (3, at
--       least 1), chunk = leafChunkTokens (min(20000, budget/4), at least 256), leaf =
--       leafTokens (min(2400, budget/16), at least 64), condensed = condensedTokens
--       (min(2000, budget/10), at least 64), cap = budget * summaryShare (0.25), reserve = 0
--       (tokens the engine keeps for something of its own; set it before assembling).
--   dag.assemble(state, messages, budget, s) -> r: condenses and folds as above and returns
--       r.result (an assemble result: messages, estimatedTokens, systemPromptAddition),
--       r.state (the state, changed in place), r.start (the first message sent verbatim),
--       r.request (the index of the turn's request, or nil) and r.used (the tokens of
--       r.result.messages).
--   dag.compact(state, p, s) -> r: condenses everything before the fresh tail; r.result is a
--       compact result (the rendered summaries as the compaction summary, the tail's first
--       message as firstKeptEntryId, or `compacted = false`), r.state the state.
--   dag.condense(state, messages, from, to, s) -> state: messages[from..to] (whole tool groups)
--       into leaves of about s.chunk tokens, folding as leaves pile up.
--   dag.relieve(state, s) -> state: regular folds, then forced ones until render(state) fits
--       s.cap (or one summary is left).
--   dag.render(state) -> the summaries as text, oldest first, each in `<summary depth messages
--       first last>`; "" when there are none.
--   dag.group_end(messages, i, to) -> the last index of the tool group starting at i, not past to
--   dag.bounded(text, cap) -> text, cut to cap tokens (head and tail kept) if it is larger
--
-- The Rhai twin (stdlib/dag.rhai) has the same functions, arguments and results, with 0-based
-- indices (r.request is () when there is none) and the same state (`throughAt` stays 1-based).
--
-- Cost: O(n) token counts per call plus the summarizer calls for what is newly condensed.

local groups = require("groups")
local fit = require("fit")
local msg = require("msg")
local tail = require("tail")

local M = {}

function M.settings(config, budget)
  config = config or {}
  return {
    freshTailMessages = config.freshTailMessages or 8,
    fanout = math.max(2, config.fanout or 4),
    maxDepth = math.max(1, config.maxDepth or 3),
    chunk = config.leafChunkTokens or math.max(256, math.min(20000, budget // 4)),
    leaf = config.leafTokens or math.max(64, math.min(2400, budget // 16)),
    condensed = config.condensedTokens or math.max(64, math.min(2000, budget // 10)),
    cap = budget * (config.summaryShare or 0.25) // 1,
    reserve = 0,
  }
end

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
local function fold(state, lv, k, s)
  local L = levels(state)
  local up = math.min(lv + 1, s.maxDepth + 1)
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
  local node = summarize_nodes(take, up - 1, s.condensed)
  if up == lv then
    table.insert(L[up], 1, node)
  else
    table.insert(L[up], node)
  end
end

function M.render(state)
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

function M.relieve(state, s)
  local L = levels(state)
  local lv = 1
  while lv <= #L do
    while #L[lv] >= s.fanout do
      fold(state, lv, s.fanout, s)
    end
    lv += 1
  end
  while host.tokens(M.render(state)) > s.cap do
    local crowded = nil
    for i = 1, #L do
      if #L[i] >= 2 then
        crowded = i
        break
      end
    end
    if crowded then
      fold(state, crowded, 2, s)
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
      local top_lv = math.min(#L + 1, s.maxDepth + 1)
      local top = summarize_nodes(all, top_lv - 1, s.condensed)
      for i = 1, #L do
        L[i] = {}
      end
      L[top_lv] = { top }
    end
  end
  return state
end

function M.group_end(messages, i, to)
  local e = i
  if groups.calls_tools(messages[i]) then
    while e + 1 <= to and messages[e + 1].role == "toolResult" do
      e += 1
    end
  end
  return e
end

function M.condense(state, messages, from, to, s)
  local L = levels(state)
  L[1] = L[1] or {}
  local i = from
  while i <= to do
    local j, acc = i, 0
    repeat
      local e = M.group_end(messages, j, to)
      for x = j, e do
        acc += host.tokens(messages[x])
      end
      j = e + 1
    until j > to or acc >= s.chunk
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
      text = host.summarize(slice, { maxTokens = math.min(s.leaf, acc) }).text
    end
    table.insert(L[1], { depth = 0, text = text, count = j - i, first = messages[i].id, last = messages[j - 1].id })
    state.through = messages[j - 1].id
    state.throughAt = j - 1
    while #L[1] >= s.fanout do
      fold(state, 1, s.fanout, s)
    end
    i = j
  end
  return state
end

-- Skips compaction summaries at the start of the context; a summary this module did not
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

-- Where the fresh tail starts, and its request: the tail holds at most three quarters of what
-- the summaries and the reserve leave, so a long tool loop is condensed from its oldest groups
-- on (the newest group always stays). Returns the tail's start, the request's index (or nil)
-- and the first message not yet condensed.
local function fresh(state, messages, budget, s)
  local n = #messages
  local t = tail.fresh_tail(messages, { minMessages = s.freshTailMessages })
  local request = nil
  for i = n, t, -1 do
    if messages[i].role == "user" then
      request = i
      break
    end
  end
  local limit = (budget - s.cap - s.reserve) * 3 // 4
  local tokens = tail.tokens(messages, t)
  while tokens > limit do
    local e = M.group_end(messages, t, n)
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

function M.bounded(text, cap)
  if text ~= "" and host.tokens(text) > cap then
    return msg.trim_text(text, cap)
  end
  return text
end

function M.assemble(state, messages, budget, s)
  local n = #messages
  local t, request, start = fresh(state, messages, budget, s)
  local tail_tokens = tail.tokens(messages, t)

  -- Condense the oldest verbatim messages when they outgrow their room, a chunk at a time.
  local room = budget - s.cap - s.reserve - tail_tokens
  local raw = 0
  for i = start, t - 1 do
    raw += host.tokens(messages[i])
  end
  if raw > room then
    local target = math.max(0, room - s.chunk)
    local cut = start
    while cut < t and raw > target do
      local e = M.group_end(messages, cut, t - 1)
      for x = cut, e do
        raw -= host.tokens(messages[x])
      end
      cut = e + 1
    end
    M.condense(state, messages, start, cut - 1, s)
    start = cut
  end
  M.relieve(state, s)

  local addition = M.bounded(M.render(state), s.cap)
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
  local result = { messages = out, estimatedTokens = used + add_tokens }
  if addition ~= "" then
    result.systemPromptAddition = addition
  end
  return { result = result, state = state, start = start, request = request, used = used }
end

function M.compact(state, p, s)
  local messages = p.messages
  local t, _, start = fresh(state, messages, p.tokenBudget, s)
  if start < t then
    M.condense(state, messages, start, t - 1, s)
  end
  M.relieve(state, s)
  local summary = M.bounded(M.render(state), s.cap)
  local only_own_summary = t == 2 and messages[1].role == "compactionSummary"
  if t <= 1 or only_own_summary or summary == "" then
    return {
      result = { ok = true, compacted = false, reason = "nothing to compact: only the fresh tail is left" },
      state = state,
    }
  end
  state.ownCompaction = true
  return {
    result = {
      ok = true,
      compacted = true,
      result = {
        summary = summary,
        firstKeptEntryId = messages[t].id,
        tokensBefore = p.currentTokenCount,
        tokensAfter = host.tokens(summary) + tail.tokens(messages, t),
      },
    },
    state = state,
  }
end

return M
