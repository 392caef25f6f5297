-- msg: small helpers for reading and copying messages.
--
-- Messages the host hands an engine are frozen: never modify one. To change a message, make a
-- copy (`msg.copy`, `msg.with_text`, `msg.trim`); a copy keeps the original's `id`, so the host
-- knows which transcript entry it stands for. A message an engine invents (`msg.user`) has no
-- `id`. Returning an original table unchanged costs nothing, so prefer originals.
--
--   local msg = require("msg")
--   msg.copy(m)                  -> an unfrozen copy (content and blocks copied too)
--   msg.role(m)                  -> "user" | "assistant" | "toolResult" | ...
--   msg.is_user(m), msg.is_assistant(m), msg.is_tool_result(m), msg.is_summary(m)
--   msg.text(m)                  -> the text a reader sees: text blocks joined by "\n", or the
--                                   `summary` of a summary message (thinking and tool calls excluded)
--   msg.tool_call_ids(m)         -> ids of the `toolCall` blocks of an assistant message, in order
--   msg.has_tool_calls(m)        -> whether an assistant message calls tools
--   msg.with_text(m, text)       -> a copy whose text is `text` (non-text blocks such as tool calls
--                                   and images are kept, after the text)
--   msg.user(text)               -> a new user message (no id)
--   msg.trim_text(s, max_tokens) -> `s` cut to at most `max_tokens` (by host.tokens), keeping
--                                   about 2/3 head and 1/3 tail around a marker; "" if nothing fits
--   msg.trim(m, max_tokens)      -> `m` itself when it fits, else a copy with its text trimmed
--   msg.head(s, n), msg.tail(s, n) -> at most n bytes from the start / end of `s`, never cutting
--                                   a UTF-8 character in two
--
-- Everything is O(size of the message).

local M = {}

local function copy_value(v)
  if type(v) ~= "table" then
    return v
  end
  local out = {}
  for k, x in pairs(v) do
    out[k] = copy_value(x)
  end
  return out
end

function M.copy(m)
  return copy_value(m)
end

function M.role(m)
  return m.role
end

function M.is_user(m)
  return m.role == "user"
end

function M.is_assistant(m)
  return m.role == "assistant"
end

function M.is_tool_result(m)
  return m.role == "toolResult"
end

function M.is_summary(m)
  return m.role == "compactionSummary" or m.role == "branchSummary"
end

function M.text(m)
  if M.is_summary(m) then
    return m.summary or ""
  end
  local c = m.content
  if type(c) == "string" then
    return c
  end
  if type(c) ~= "table" then
    return ""
  end
  local parts = {}
  for i = 1, #c do
    local b = c[i]
    if b.type == "text" and type(b.text) == "string" then
      parts[#parts + 1] = b.text
    end
  end
  return table.concat(parts, "\n")
end

function M.tool_call_ids(m)
  local ids = {}
  local c = m.content
  if m.role ~= "assistant" or type(c) ~= "table" then
    return ids
  end
  for i = 1, #c do
    local b = c[i]
    if b.type == "toolCall" then
      ids[#ids + 1] = b.id
    end
  end
  return ids
end

function M.has_tool_calls(m)
  local c = m.content
  if m.role ~= "assistant" or type(c) ~= "table" then
    return false
  end
  for i = 1, #c do
    if c[i].type == "toolCall" then
      return true
    end
  end
  return false
end

function M.with_text(m, text)
  local out = M.copy(m)
  if M.is_summary(m) then
    out.summary = text
    return out
  end
  local c = m.content
  if type(c) ~= "table" then
    out.content = text
    return out
  end
  local blocks = { { type = "text", text = text } }
  for i = 1, #c do
    local b = c[i]
    if b.type ~= "text" then
      blocks[#blocks + 1] = copy_value(b)
    end
  end
  out.content = blocks
  return out
end

function M.user(text)
  return { role = "user", content = text }
end

-- The largest byte length <= n that does not end inside a UTF-8 sequence of `s`.
local function head_len(s, n)
  if n <= 0 then
    return 0
  end
  if n >= #s then
    return #s
  end
  -- Back off while the next byte is a continuation byte (0x80..0xBF).
  while n > 0 do
    local b = string.byte(s, n + 1)
    if b < 0x80 or b >= 0xC0 then
      break
    end
    n -= 1
  end
  return n
end

-- The suffix of `s` of at most n bytes that starts on a UTF-8 boundary.
local function tail_of(s, n)
  if n <= 0 then
    return ""
  end
  local start = #s - n + 1
  if start <= 1 then
    return s
  end
  while start <= #s do
    local b = string.byte(s, start)
    if b < 0x80 or b >= 0xC0 then
      break
    end
    start += 1
  end
  return string.sub(s, start)
end

local function cut(s, keep)
  local head = head_len(s, (keep * 2) // 3)
  local tail = tail_of(s, keep - head)
  local omitted = #s - head - #tail
  return string.sub(s, 1, head) .. "\n[... " .. omitted .. " bytes trimmed to fit the context budget ...]\n" .. tail
end

function M.head(s, n)
  return string.sub(s, 1, head_len(s, n))
end

M.tail = tail_of

function M.trim_text(s, max_tokens)
  if host.tokens(s) <= max_tokens then
    return s
  end
  -- Binary search the largest kept length that fits.
  local lo, hi = 0, #s
  while lo < hi do
    local mid = (lo + hi + 1) // 2
    if host.tokens(cut(s, mid)) <= max_tokens then
      lo = mid
    else
      hi = mid - 1
    end
  end
  local best = cut(s, lo)
  if host.tokens(best) <= max_tokens then
    return best
  end
  return ""
end

function M.trim(m, max_tokens)
  if host.tokens(m) <= max_tokens then
    return m
  end
  if M.is_summary(m) then
    -- The host wraps summaries in a fixed preamble; leave room for it.
    local overhead = host.tokens(m) - host.tokens(m.summary or "")
    return M.with_text(m, M.trim_text(m.summary or "", math.max(0, max_tokens - overhead)))
  end
  local out = M.copy(m)
  local c = out.content
  if type(c) == "string" then
    out.content = M.trim_text(c, max_tokens)
    return out
  end
  if type(c) ~= "table" then
    return out
  end
  -- Non-text blocks (tool calls, images) keep their cost; text and thinking share the rest.
  local fixed, n = 0, 0
  for i = 1, #c do
    local b = c[i]
    if b.type == "text" or b.type == "thinking" then
      n += 1
    end
  end
  local whole = host.tokens(m)
  local texts = 0
  for i = 1, #c do
    local b = c[i]
    if b.type == "text" then
      texts += host.tokens(b.text or "")
    elseif b.type == "thinking" then
      texts += host.tokens(b.thinking or "")
    end
  end
  fixed = whole - texts
  if n == 0 then
    return out
  end
  local share = math.max(0, max_tokens - fixed) // n
  for i = 1, #c do
    local b = c[i]
    if b.type == "text" then
      b.text = M.trim_text(b.text or "", share)
    elseif b.type == "thinking" then
      b.thinking = M.trim_text(b.thinking or "", share)
    end
  end
  return out
end

return M
