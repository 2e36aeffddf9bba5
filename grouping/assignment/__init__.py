"""Task -> processor assignment: host affinity (SAMZA-1554) and lag awareness (KIP-441).

One pure function, :func:`assign_tasks`, maps (tasks, live processors, previous job model,
task locality, task lags, which tasks are stateful, params) to container models with
active and standby tasks, and says whether a probing rebalance is wanted.

How it decides, in order:

1. **Stickiness.** Every task has a *sticky owner*: the live processor that ran it (or, after
   an elasticity change, its parent or most of its children) in the previous job model.
2. **Balanced targets.** Per processor, a target count within ``balance_factor`` of every
   other processor is chosen to keep as many tasks on their sticky owner as balance allows
   (:func:`window_targets`; this is also the lower bound on moves).
3. **Keep, then place.** A processor over its target gives up the tasks that are easiest to
   place elsewhere and least tied to the partition groups it holds. Each remaining task goes,
   in order of preference, to a processor at its last location, to a processor already
   holding other buckets of its partition (SEP-32 optimisation 1), or to the least loaded
   processor (ties: smallest processor id).
4. **Lag.** For a stateful task only processors that are *caught up* (lag <=
   ``acceptable_recovery_lag``; if none is, those with the smallest known lag; if no lag is
   known, all) may run the active. The balanced target prefers them, and frees a slot on
   one by moving another of its tasks to a caught-up peer when that keeps balance. Where
   balance still needs a processor that is not caught up, the active stays on a caught-up
   one (previous owner first), the target gets a *warm-up* standby (at most
   ``max_warmup_replicas`` at once) and a probing rebalance is requested. Standbys
   (``num_standbys``) go to processors other than the active, preferring those that hold
   state and other locations; a standby whose target is not caught up stays where a more
   caught-up copy is and warms up the target.

Everything iterates in sorted order (tasks by name, processors by id), so the same input
gives the same output, and a balanced assignment fed back unchanged is returned unchanged.
"""

from grouping.assignment.assign import assign_tasks, assign_tasks_traced
from grouping.assignment.params import (
    UNKNOWN_LAG,
    AssignmentParams,
    AssignmentResult,
    AssignmentTrace,
)
from grouping.assignment.targets import WindowTargets, window_targets

__all__ = [
    "UNKNOWN_LAG",
    "AssignmentParams",
    "AssignmentResult",
    "AssignmentTrace",
    "WindowTargets",
    "assign_tasks",
    "assign_tasks_traced",
    "window_targets",
]
