-- docs/examples/first_policy.lua as an engine that owns compaction: the host never compacts its
-- session, so p.messages is the whole session; the running summary is still updated only with
-- what fell out since. Only for measuring (docs/writing-engines.md, "What host.summarize costs").
-- A first policy: the newest turn always, decisions pinned by our own rule, and what falls out
-- summarized incrementally into a message at the top.
local fit = require("fit")
local msg = require("msg")
local tail = require("tail")

local M = {
  info = { id = "first-policy-owning", name = "First policy, owning compaction", ownsCompaction = true },
}

-- Our own pin rule: a user message that starts with "DECISION:".
local function is_decision(m)
  return msg.is_user(m) and string.sub(msg.text(m), 1, 9) == "DECISION:"
end

-- Where message `id` is in `messages`, or nil.
local function position(messages, id)
  for i = 1, #messages do
    if messages[i].id == id then
      return i
    end
  end
  return nil
end

-- The running summary, brought up to date with messages[1..last] (which fell out of the
-- context). Only the span not summarized yet is sent, with the previous summary to fold in.
local function running_summary(p, messages, last, max_tokens)
  local done = p.state.upto and position(messages, p.state.upto) or 0
  if done < last then
    local span = {}
    for i = done + 1, last do
      span[#span + 1] = messages[i]
    end
    local s = host.summarize(span, { maxTokens = max_tokens, previousSummary = p.state.summary })
    p.state.summary = s.text
    p.state.upto = messages[last].id
  end
  return p.state.summary
end

function M.ingest(p)
  return { ingested = false }
end

function M.assemble(p)
  local messages, budget = p.messages, p.tokenBudget
  local t = tail.fresh_tail(messages) -- the newest user message and everything after it
  -- 1. Even the newest turn does not fit: squeeze it (huge tool results trimmed, oldest
  --    groups dropped), and send nothing else.
  if tail.tokens(messages, t) > budget then
    local out, used = fit.squeeze(messages, budget)
    return { messages = out, estimatedTokens = used }
  end
  -- 2. Pins: the host's compaction summary (the model must see it), and decisions before the
  --    newest turn within a quarter of the budget.
  local pins, pin_tokens = {}, 0
  for i = 1, t - 1 do
    local n = host.tokens(messages[i])
    if msg.is_summary(messages[i]) or (is_decision(messages[i]) and pin_tokens + n <= budget // 4) then
      pins[#pins + 1] = i
      pin_tokens += n
    end
  end
  -- 3. The newest messages that fit beside the pins and a fifth of the budget for the summary.
  local room = budget // 5
  local kept, used = fit.newest_first(messages, budget, { reserve = pin_tokens + room })
  local first_kept = #messages - #kept + 1
  if first_kept > t then
    -- The newest turn does not fit beside them: send it alone.
    kept, used = fit.newest_first(messages, budget)
    return { messages = kept, estimatedTokens = used }
  end
  -- 4. A summary of what fell out, as a message of its own at the top.
  local out = {}
  if first_kept > 1 and room > 40 then
    local text = running_summary(p, messages, first_kept - 1, room - 20)
    local summary = msg.user("Summary of the earlier conversation:\n" .. text)
    local n = host.tokens(summary)
    if n <= room then
      out[#out + 1] = summary
      used += n
    end
  end
  for _, i in ipairs(pins) do
    if i < first_kept then -- a pin still in the kept run is sent there
      out[#out + 1] = messages[i]
      used += host.tokens(messages[i])
    end
  end
  for _, m in ipairs(kept) do
    out[#out + 1] = m
  end
  return { messages = out, estimatedTokens = used }
end

function M.compact(p)
  return host.delegateCompaction(p)
end

return M
