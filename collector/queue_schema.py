"""The rollout queue's states and tables, in one place: the queue logic (`rollout_state`), both store backends
(which create the tables) and the trainer side (which waits for final states) read them from here.

queuing -> running -> succeeded | failed | timeout (a failed or timed-out attempt re-queues the rollout until its
`max_attempts`); cancelled ends a rollout from outside.
"""

from __future__ import annotations

QUEUING, RUNNING = "queuing", "running"
SUCCEEDED, FAILED, TIMEOUT, CANCELLED = "succeeded", "failed", "timeout", "cancelled"
FINAL_STATUSES = frozenset({SUCCEEDED, FAILED, TIMEOUT, CANCELLED})
REPORTABLE_STATUSES = frozenset({SUCCEEDED, FAILED})  # what a runner may report for its attempt
MODES = frozenset({"train", "val", "dev"})

STATE_SCHEMA = """
CREATE TABLE IF NOT EXISTS agl_rollouts (
    rollout_id TEXT PRIMARY KEY,
    position BIGINT NOT NULL,
    task_id TEXT NOT NULL,
    group_id TEXT NOT NULL,
    mode TEXT NOT NULL,
    input TEXT NOT NULL,
    metadata TEXT NOT NULL,
    status TEXT NOT NULL,
    max_attempts INTEGER NOT NULL,
    timeout_s DOUBLE PRECISION,
    attempts INTEGER NOT NULL,
    attempt_id TEXT,
    resources_version BIGINT,
    reward DOUBLE PRECISION,
    error TEXT,
    created_ns BIGINT NOT NULL,
    updated_ns BIGINT NOT NULL,
    end_ns BIGINT
);
CREATE INDEX IF NOT EXISTS agl_rollouts_by_status ON agl_rollouts (status, position);
CREATE INDEX IF NOT EXISTS agl_rollouts_by_group ON agl_rollouts (group_id);  -- the rollout view's group
CREATE INDEX IF NOT EXISTS agl_rollouts_by_position ON agl_rollouts (position);  -- paging (export)
CREATE INDEX IF NOT EXISTS agl_rollouts_by_group_position ON agl_rollouts (group_id, position);
CREATE TABLE IF NOT EXISTS agl_attempts (
    rollout_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    status TEXT NOT NULL,
    runner_id TEXT NOT NULL,
    resources_version BIGINT,
    start_ns BIGINT NOT NULL,
    heartbeat_ns BIGINT NOT NULL,
    end_ns BIGINT,
    error TEXT,
    reward DOUBLE PRECISION,
    PRIMARY KEY (rollout_id, attempt_id)
);
CREATE INDEX IF NOT EXISTS agl_attempts_by_status ON agl_attempts (status, heartbeat_ns);
CREATE TABLE IF NOT EXISTS agl_resources (
    version BIGINT PRIMARY KEY,
    resources TEXT NOT NULL,
    created_ns BIGINT NOT NULL
);
"""

# The resource a training publishes when it starts and ends (`{"run_id", "state": "running"|"finished"|"failed"}`):
# runners started on their own wait for a training while it runs and stop when it ends (unless told to keep serving).
TRAINING_STATE_RESOURCE = "agl.training"
