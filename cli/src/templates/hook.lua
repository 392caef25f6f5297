-- __ID__: a pipeline hook for ctxhost (written by `ctxhost new --kind hook`).
--
-- A hook is one small part of a context policy. The `pipeline` engine runs several hooks on
-- every model call, in the configured order (a higher `info.priority` runs first), and a hook
-- that fails is skipped and quarantined alone: the others go on. Try it with
--   ctxhost check __FILE__        load, validate and run each hook function it defines
-- and compose it in a config:
--   plugins: { slots: { contextEngine: "pipeline" },
--              entries: { "__ID__": { path: "__FILE__", config: { note: "..." } } } },
--   host: { pipeline: { hooks: ["__ID__"] } },
-- The guide is docs/pipeline.md (in the ctxhost repository).
--
-- Every hook function receives one table `p`:
--   p.messages   the session context, oldest first (under `prune`: what the prune hook before
--                this one left); frozen: change a copy (`msg.copy`)
--   p.lifecycle  sessionId, sessionKey, runId (the same for every call of one turn), trigger,
--                modelId, provider, tokenWindow {contextWindowTokens, reservedOutputTokens,
--                estimatedInputTokens}, usage, storageCursor {backend, sessionId, seq, entryId};
--                a field the host does not know is absent
--   p.state      a per-session table the host saves with the session and restores after a
--                reload or a restart (plain data only)
-- `host.config` is this hook's entry config. The host sets each block's `source` to the hook's
-- id and measures every block itself.
--
-- Optional hook functions are below, each inside `--[[ ... --]]`: turn `--[[` into `---[[` to
-- enable one.

local prune = require("prune") -- stdlib modules: msg, groups, tail, fit, prune, pin

local M = {
  info = {
    id = "__ID__", -- should equal the entry id in the config (the file name, `_` as `-`)
    name = "__NAME__",
    version = "0.1.0",
    priority = 0, -- higher runs first; hooks of equal priority keep the configured order
    -- ownsCompaction = true, -- the host never compacts for you (at most one hook may)
  },
}

-- collect: every model call. Return a contribution, or nil. A contribution is a table of
-- placement fields, each a list of blocks { id?, text, priority?, metadata? }:
--   prependSystemPrompt, appendSystemPrompt    around the system prompt (systemPrompt: a
--                                              string that replaces it; the last writer wins)
--   prependBeforeMetadata, metadata, injectAfterMetadata, prependContext   before the user turn
--   appendAfterUserMessage, appendContext      after the user turn
--   pluginData   a table merged into the data later hooks (and later calls) read
-- Within a field, higher priority comes first; over `host.pipeline.contributionShare` of the
-- budget the lowest-priority blocks are dropped first (and reported).
--   p.prompt       the user's prompt, when known
--   p.pluginData   what earlier hooks and calls left
function M.collect(p)
  p.state.calls = (p.state.calls or 0) + 1
  local note = (host.config or {}).note
  if note == nil then
    return nil
  end
  return { appendSystemPrompt = { { id = "note", text = note, priority = 0 } } }
end

--[[ project: every model call, after every hook's `collect`. p.contributions holds what they
-- contributed. Return { messages?, projection?, contribution? }: `messages` replaces the list
-- the model sees, `projection` (any data) is reported with the call, `contribution` adds blocks.
function M.project(p)
  return { projection = { messages = #p.messages } }
end
--]]

--[[ prune: only under token pressure, in memory (the transcript is never rewritten).
-- p.tokenWindow.contextWindowTokens is the budget. Return { messages?, dropped?,
-- contribution?, compactionHandled? }; compactionHandled = true skips this call's compaction.
function M.prune(p)
  local pruned = prune.tool_results(p.messages, { budget = p.tokenWindow.contextWindowTokens })
  return { messages = pruned }
end
--]]

--[[ compactionPlan: when the session is compacted. p.tokenWindow, p.storageCursor,
-- p.currentTokenCount, p.force, p.customInstructions. Return { plan = <a compact result> };
-- the first hook's plan wins, and with none the host's built-in compaction runs.
function M.compactionPlan(p)
  local plan = host.delegateCompaction({
    sessionId = p.lifecycle.sessionId,
    tokenBudget = p.tokenWindow.contextWindowTokens,
    force = p.force,
    currentTokenCount = p.currentTokenCount,
    compactionTarget = "budget",
  })
  return { plan = plan }
end
--]]

--[[ beforeCompaction / afterCompaction: observers around a compaction. p.messageCount,
-- p.tokenCount (before) / p.compacted (after). The result is ignored.
function M.beforeCompaction(p)
  p.state.compactions = (p.state.compactions or 0) + 1
end

function M.afterCompaction(p)
end
--]]

--[[ afterAppend: observer of what the session stored. p.entries, the stored messages.
function M.afterAppend(p)
  p.state.stored = (p.state.stored or 0) + #p.entries
end
--]]

return M
