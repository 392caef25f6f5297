-- hierarchical: rolling multi-level summaries, after lossless-claw's summary DAG.
--
-- Policy: the fresh tail (the newest user message and its tool replies, stretched to at least
-- `freshTailMessages` messages) and the most recent older messages are sent verbatim. When the
-- verbatim part outgrows its share of the budget, its oldest messages are condensed, a chunk of
-- about `leafChunkTokens` at a time (whole tool groups), into *leaf* summaries (depth 0) with
-- `host.summarize`. When `fanout` summaries pile up at one depth, the oldest of them are folded
-- into one summary a level up (depth 1, 2, ... up to `maxDepth`; at the top depth the oldest
-- summaries fold into one of the same depth). A fold never grows: its summary gets at most the
-- tokens of what it folds (a leaf, at most those of its messages; a leaf of a few dozen tokens
-- keeps their text). When all summaries together outgrow `summaryShare` of the budget, folding
-- is forced (two at a time, then everything into one), and as a last resort the text is
-- truncated, so the budget always holds. A fresh tail larger than three quarters of what the
-- summaries leave (a single-turn agentic session's tool loop) is condensed too, oldest tool
-- groups first; the request that started it is still sent verbatim. The summaries live in
-- `p.state` and reach the model as `systemPromptAddition`, oldest first, each labelled with its
-- depth, how many messages it covers and their id range.
--
-- The DAG itself (leaves, folds, the size checks, compaction) is the stdlib's `dag` module,
-- shared with `scripts/recall.lua`; this file is its configuration.
--
-- Compaction: `ownsCompaction = true`. `compact` condenses everything before the fresh tail and
-- returns the rendered summaries as the compaction summary with the tail's first message as
-- `firstKeptEntryId`, so the host's session shrinks to that summary plus the tail; the next
-- `assemble` recognises that summary as its own and does not count it twice. A summary written
-- by anyone else (built-in compaction before this engine took over) becomes the oldest node.
--
-- Configuration (plugins.entries["hierarchical"].config), all optional; token sizes default to
-- a fraction of the turn's budget:
--   freshTailMessages  number  default 8                       messages always sent verbatim
--   fanout             number  default 4                       summaries per fold
--   summaryShare       number  default 0.25                    budget share of all summaries
--   leafChunkTokens    number  default min(20000, budget/4)    tokens condensed per leaf
--   leafTokens         number  default min(2400, budget/16)    size of a leaf summary
--   condensedTokens    number  default min(2000, budget/10)    size of a folded summary
--   maxDepth           number  default 3                       deepest summary level

local dag = require("dag")

return function(ctx)
  local config = ctx.config or {}

  local M = {
    info = {
      id = "hierarchical",
      name = "Hierarchical summaries",
      version = "1.0.0",
      ownsCompaction = true,
    },
  }

  function M.ingest(p)
    return { ingested = false }
  end

  function M.assemble(p)
    return dag.assemble(p.state, p.messages, p.tokenBudget, dag.settings(config, p.tokenBudget)).result
  end

  function M.compact(p)
    return dag.compact(p.state, p, dag.settings(config, p.tokenBudget)).result
  end

  return M
end
