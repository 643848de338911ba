-- Placeholder: number 23 is reserved for another branch's migration (issue 39's levels use
-- 24). The migrations must run 1, 2, 3, ... with no gap, so this branch holds the number with
-- a step that does nothing. Drop this file when the branch that owns 0023 is merged.
SELECT 1;
