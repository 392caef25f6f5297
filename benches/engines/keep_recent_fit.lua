-- keep_recent_fit: the "keep-recent fit" of shared/data/workloads by the host's fit primitive,
-- for benches/workloads.rs (keep_recent.lua is the same policy as a script loop).
--
-- host.fit walks back from the newest message in whole tool groups (a toolResult joins the
-- tool-calling assistant message before its run of results), keeps each group that still fits
-- and stops at the first that does not: on the workloads, where every result follows its call,
-- these are keep_recent's units. Tokens by the workload's rule, count = "textChars/4":
-- ceil(chars / 4) of the message's text (text blocks joined by "\n"), chars in code points,
-- cached per resident message by the host.

local M = { info = { id = "keep-recent-fit", name = "Keep recent (workload fit, host.fit)", ownsCompaction = false } }

local opts = { count = "textChars/4" }

function M.ingest(p)
  return { ingested = false }
end

function M.assemble(p)
  local kept, used = host.fit(p.messages, p.tokenBudget, opts)
  return { messages = kept, estimatedTokens = used }
end

function M.compact(p)
  return host.delegateCompaction(p)
end

return M
