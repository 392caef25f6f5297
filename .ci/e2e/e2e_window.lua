-- The end-to-end test's engine (its Rhai twin is e2e_window.rhai): keeps the newest 2
-- messages, says so in the system prompt, fails on purpose when the prompt says BOOM, and owns
-- compaction (it summarizes all but the newest 2). The test replaces __VERSION__.
local M = { info = { id = "e2e-window", name = "E2E window", version = "1", ownsCompaction = true } }
local KEEP = 2

function M.ingest(p) return { ingested = true } end

function M.assemble(p)
  if p.prompt and string.find(p.prompt, "BOOM", 1, true) then error("BOOM requested by the test") end
  p.state.n = (p.state.n or 0) + 1
  local out = {}
  for i = math.max(1, #p.messages - KEEP + 1), #p.messages do table.insert(out, p.messages[i]) end
  return {
    messages = out,
    estimatedTokens = host.tokens(out),
    systemPromptAddition = "CTXHOST-E2E __VERSION__ lang=lua kept " .. #out .. " of " .. #p.messages .. " n=" .. p.state.n,
  }
end

function M.compact(p)
  local n = #p.messages
  if n < 3 then return { ok = true, compacted = false, reason = "too small" } end
  local older = {}
  for i = 1, n - KEEP do table.insert(older, p.messages[i]) end
  local s = host.summarize(older, {})
  return {
    ok = true,
    compacted = true,
    result = { summary = s.text, firstKeptEntryId = p.messages[n - KEEP + 1].id, tokensBefore = host.tokens(p.messages) },
  }
end

function M.commitTurn(p)
  p.state.commits = (p.state.commits or 0) + 1
  return { status = "committed" }
end

return M
