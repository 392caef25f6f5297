-- hook_idle_prune: a `prune` hook for benches/pipeline.rs that keeps the list as it is
-- (returns nothing). The pipeline calls it only under token pressure (the context plus the
-- contributions' share over the budget); benches/pipeline.rs reports how often it ran.

local M = { info = { id = "idle-prune", name = "Idle prune" } }

function M.prune(p)
  return nil
end

return M
