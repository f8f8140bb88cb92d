"""The training loop every backend runs under (VERL, Tinker, SFT, yours): the loop owns the step, a backend owns only
the update and the weights.

- `loop`: `TrainingLoop` (serve the policy, submit, collect, estimate, update, publish, validate, checkpoint, log),
- `backend`: the `Backend` interface (what differs: `update`, `publish`, `save`/`load`),
- `samples`: `Sample` and the samples of a batch (with the `rollout/*` metrics),
- `advantages`: the estimators (`GroupAdvantage`: GRPO per rollout or per row; `BackendAdvantage`: the backend's own;
  `RewardThreshold` and `UniformWeight` for supervised losses),
- `credit`: per-call credit (`AnchorAdvantage`: the rollout advantage plus a step advantage within anchor states),
- `schedule`: `Schedule` (which tasks each step, when to validate and save),
- `metrics`: the metric names (one table) and the trackers (console line, JSONL, verl's trackers).
"""
