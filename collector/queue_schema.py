"""The rollout queue's states and tables, in one place: the queue logic (`rollout_state`), both store backends
(which create the tables) and the trainer side (which waits for final states) read them from here.

queuing -> running -> succeeded | failed | timeout (a failed or timed-out attempt re-queues the rollout until its
`max_attempts`); cancelled ends a rollout from outside.

A run is one training (or dry run) on the collector: it holds a lease it renews while it lives (`agl_runs`). Its
rollouts and resources carry its `run_id`; a runner serves one run at a time. A run whose lease lapsed is `lost`
and its unfinished rollouts are cancelled; one that ended says how (`finished`, `failed`).
"""

from __future__ import annotations

QUEUING, RUNNING = "queuing", "running"
SUCCEEDED, FAILED, TIMEOUT, CANCELLED = "succeeded", "failed", "timeout", "cancelled"
FINAL_STATUSES = frozenset({SUCCEEDED, FAILED, TIMEOUT, CANCELLED})
REPORTABLE_STATUSES = frozenset({SUCCEEDED, FAILED})  # what a runner may report for its attempt
MODES = frozenset({"train", "val", "dev"})
RUN_RUNNING, RUN_FINISHED, RUN_FAILED, RUN_LOST = "running", "finished", "failed", "lost"
RUN_ENDINGS = frozenset({RUN_FINISHED, RUN_FAILED})  # what a run may say of its own end
RUN_STATES = frozenset({RUN_RUNNING, RUN_LOST}) | RUN_ENDINGS
MIN_LEASE_S, MAX_LEASE_S = 1.0, 3600.0  # a run's lease, checked by the trainer's settings and the collector alike

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
    end_ns BIGINT,
    run_id TEXT,
    cause TEXT
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
    cause TEXT,
    PRIMARY KEY (rollout_id, attempt_id)
);
CREATE INDEX IF NOT EXISTS agl_attempts_by_status ON agl_attempts (status, heartbeat_ns);
CREATE TABLE IF NOT EXISTS agl_resources (
    version BIGINT PRIMARY KEY,
    resources TEXT NOT NULL,
    created_ns BIGINT NOT NULL,
    run_id TEXT
);
CREATE TABLE IF NOT EXISTS agl_runs (
    run_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    lease_s DOUBLE PRECISION NOT NULL,
    heartbeat_ns BIGINT NOT NULL,
    created_ns BIGINT NOT NULL,
    end_ns BIGINT
);
"""

# Columns a store made before runs (and failure causes) existed lacks: each store adds the missing ones when it opens
# (SQLite has no ADD COLUMN IF NOT EXISTS), then creates the indexes that read them. Rollouts and resources from
# before have no run.
ADDED_COLUMNS = (
    ("agl_rollouts", "run_id", "TEXT"),
    ("agl_resources", "run_id", "TEXT"),
    ("agl_rollouts", "cause", "TEXT"),  # why an attempt failed or was stopped: "infrastructure:..." or "policy:..."
    ("agl_attempts", "cause", "TEXT"),
)
RUN_INDEXES = """
CREATE INDEX IF NOT EXISTS agl_rollouts_by_run ON agl_rollouts (run_id, status, position);
CREATE INDEX IF NOT EXISTS agl_resources_by_run ON agl_resources (run_id, version);
"""

# OTLP log records (collector/receiving/log_records.py): kept once each, found by their span or their rollout.
LOG_SCHEMA = """
CREATE TABLE IF NOT EXISTS agl_logs (
    digest TEXT PRIMARY KEY,
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    rollout_id TEXT,
    attempt_id TEXT,
    time_ns BIGINT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS agl_logs_by_span ON agl_logs (trace_id, span_id);
CREATE INDEX IF NOT EXISTS agl_logs_by_rollout ON agl_logs (rollout_id, time_ns);
"""
