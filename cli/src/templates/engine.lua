-- __ID__: a context engine for ctxhost (written by `ctxhost new`).
--
-- A context engine decides what the model sees on each turn. This file is the whole engine:
-- share it as it is. Try it with
--   ctxhost check __FILE__                  load, validate and exercise every method
--   ctxhost watch __FILE__                  replay a conversation again on every save
--   ctxhost replay --engine __FILE__        replay once and show every turn
-- The guide is docs/writing-engines.md, the contract docs/contract.md (in the ctxhost repository).
--
-- Every method receives one table `p` (camelCase fields, as in OpenClaw's TypeScript
-- interface) and returns a table. Always present in `p`: `sessionId`, `sessionKey` and
-- `state`, a per-session table the host saves with the session and restores after a reload
-- or a restart (keep it to plain data; a local variable does not survive a reload).
-- Messages from the host are frozen: to change one, change a copy (`msg.copy`).
--
-- Optional methods are below, each inside `--[[ ... --]]`: turn `--[[` into `---[[` to
-- enable one.

local fit = require("fit") -- stdlib modules: msg, groups, tail, fit, prune, pin

local M = {
  info = {
    id = "__ID__", -- should equal the entry id in the config (the file name, `_` as `-`)
    name = "__NAME__",
    version = "0.1.0",
    -- true: the host never compacts for you; `compact` must then keep the session in budget.
    ownsCompaction = false,
  },
}

-- ingest (required): one message entered the session (the user's message at the start of a
-- turn; with no `ingestBatch`, also each of the turn's replies).
--   p.message      the message (role, content, id, ...)
--   p.isHeartbeat  true for a heartbeat turn
-- Return { ingested = true } when the engine stored something about it, else false.
function M.ingest(p)
  return { ingested = false }
end

-- assemble (required): build what the model sees. Called at the start of every turn and again
-- after each tool step of the turn, so do not assume one call per turn.
--   p.messages     the session context, oldest first
--   p.tokenBudget  the tokens the result (messages + systemPromptAddition) must fit
--   p.prompt, p.model, p.availableTools, p.runtimeSettings   when the host knows them
-- Return { messages, estimatedTokens, systemPromptAddition? }: keep tool calls and their
-- results together (fit does), measure with host.tokens, and stay within the budget.
function M.assemble(p)
  local kept, tokens = fit.newest_first(p.messages, p.tokenBudget)
  return { messages = kept, estimatedTokens = tokens }
end

-- compact (required): shrink the session when it outgrows the window, or on `/compact`.
--   p.tokenBudget, p.force, p.currentTokenCount
--   p.compactionTarget   "budget" or "threshold"
--   p.customInstructions what the user typed after /compact
-- Return { ok, compacted, reason?, result? }; compacted = true only when the session shrank.
-- host.delegateCompaction(p) runs the host's built-in summarizing compaction.
function M.compact(p)
  return host.delegateCompaction(p)
end

--[[ bootstrap: once per session per engine instance (also after a reload), before the first
-- turn. p.sessionFile, p.runtimeSettings. Must be idempotent.
function M.bootstrap(p)
  p.state.turns = p.state.turns or 0
  return { bootstrapped = true }
end
--]]

--[[ ingestBatch: a turn's new messages in one call, instead of `ingest` per message.
-- p.messages, p.isHeartbeat. Return { ingestedCount }.
function M.ingestBatch(p)
  return { ingestedCount = 0 }
end
--]]

--[[ afterTurn: after every turn, with the turn's messages. p.messages,
-- p.prePromptMessageCount (messages before this turn), p.tokenBudget, p.isHeartbeat.
-- Return nothing.
function M.afterTurn(p)
  p.state.turns = (p.state.turns or 0) + 1
end
--]]

--[[ commitTurn: commit a finished turn exactly once. p.advancementKey, p.messages.
-- Return { status = "committed" }, or "duplicate" for a key seen before.
function M.commitTurn(p)
  p.state.committed = p.state.committed or {}
  if p.state.committed[p.advancementKey] then
    return { status = "duplicate" }
  end
  p.state.committed[p.advancementKey] = true
  return { status = "committed" }
end
--]]

--[[ maintain: housekeeping after bootstrap, turns and compactions.
-- p.reason = "bootstrap" | "turn" | "compaction". Return { changed, bytesFreed, rewrittenEntries }.
function M.maintain(p)
  return { changed = false, bytesFreed = 0, rewrittenEntries = 0, reason = "nothing to do" }
end
--]]

--[[ prepareSubagentSpawn: a subagent is about to start. p.parentSessionKey,
-- p.childSessionKey, p.contextMode, p.ttlMs. Return nothing, or { rollback = function } that
-- the host calls if the spawn fails.
function M.prepareSubagentSpawn(p)
  return nil
end
--]]

--[[ onSubagentEnded: a subagent finished. p.childSessionKey, p.reason. Return nothing.
function M.onSubagentEnded(p)
end
--]]

--[[ dispose: the instance retires (reload, uninstall, shutdown). Return nothing.
function M.dispose(p)
end
--]]

return M
