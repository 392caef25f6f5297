-- hook_observer: an `afterAppend` observer for benches/pipeline.rs that counts the entries
-- stored. An observer runs only when messages are stored, never in `assemble`, so in the bench
-- it costs only its place in the pipeline.

local M = { info = { id = "observer", name = "Append observer" } }

local seen = 0

function M.afterAppend(p)
  seen += #p.entries
end

return M
