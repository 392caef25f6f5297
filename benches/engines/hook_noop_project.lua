-- hook_noop_project: a `project` hook that changes nothing (returns nothing), for
-- benches/pipeline.rs: the fixed cost of one more hook call on every model call.

local M = { info = { id = "noop-project", name = "No-op project" } }

function M.project(p)
  return nil
end

return M
