-- hook_note: a cheap `collect` hook for benches/pipeline.rs: one small block appended to the
-- system prompt on every call.

local M = { info = { id = "note", name = "Bench note" } }

function M.collect(p)
  return { appendSystemPrompt = { { id = "note", text = "Answer in English." } } }
end

return M
