"""The collector's trainer-facing API as methods (rollout spans, the rollout queue, resources, runs), written once for
`Client` (values) and `AsyncClient` (coroutines): each method says which request it makes, `_request` makes it."""

from __future__ import annotations

import uuid
from typing import Any


def rollout_params(attempt_id: str | None, latest: bool, min_spans: int, timeout: float) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if attempt_id:
        params["attempt_id"] = attempt_id
    if latest:
        params["latest"] = "true"
    if min_spans:
        params["min_spans"] = min_spans
        params["timeout"] = timeout
    return params


def batch_body(rollout_ids: list[str], latest: bool, attempt_ids: list[str] | None) -> dict[str, Any]:
    if attempt_ids is not None:
        if len(attempt_ids) != len(rollout_ids):
            raise ValueError("attempt_ids must pair one-to-one with rollout_ids")
        return {"rollouts": [{"rollout_id": r, "attempt_id": a} for r, a in zip(rollout_ids, attempt_ids, strict=True)]}
    return {"rollouts": [{"rollout_id": rollout_id, "latest": latest} for rollout_id in rollout_ids]}


class CollectorCalls:
    """The collector's trainer-facing API (rollout spans, the rollout queue, resources), shared by `Client`, whose
    methods return values, and `AsyncClient`, whose methods return coroutines."""

    def _request(
        self,
        method: str,
        path: str,
        pick: str | None = None,
        *,
        flat_spans: bool = False,
        repeatable: bool = True,
        **options: Any,
    ) -> Any:
        """One request, retried as the module docstring says (`repeatable`: harmless to repeat once sent)."""
        raise NotImplementedError

    def rollout_spans(self, rollout_id: str, *, attempt_id: str | None = None, latest: bool = False) -> Any:
        """Spans of a rollout in ingest order: one attempt, the latest one, or all attempts (default)."""
        params = rollout_params(attempt_id, latest, 0, 0)
        return self._request("GET", f"/v1/rollouts/{rollout_id}/spans", "spans", params=params, flat_spans=True)

    def wait_for_rollout(
        self,
        rollout_id: str,
        *,
        min_spans: int = 1,
        timeout: float = 30.0,
        attempt_id: str | None = None,
        latest: bool = False,
    ) -> Any:
        """Block until at least `min_spans` spans of the rollout are committed (or `timeout`), then return them."""
        params = rollout_params(attempt_id, latest, min_spans, timeout)
        return self._request(
            "GET", f"/v1/rollouts/{rollout_id}/spans", "spans", params=params, timeout=timeout + 10, flat_spans=True
        )

    def rollouts_spans(
        self, rollout_ids: list[str], *, latest: bool = False, attempt_ids: list[str] | None = None
    ) -> Any:
        """Spans of many rollouts in one request (a training batch): all attempts, the latest, or the given ones."""
        body = batch_body(rollout_ids, latest, attempt_ids)
        return self._request("POST", "/v1/rollouts/spans", "rollouts", json=body, flat_spans=True)

    def complete_rollouts_spans(
        self, rollout_ids: list[str], *, attempt_ids: list[str] | None = None, wait_s: float = 30.0
    ) -> Any:
        """`rollouts_spans`, waiting on the server (event-driven, at most `wait_s`) until every rollout's spans have
        their parents, i.e. other processes' late exports arrived: `{"rollouts": {id: spans}, "incomplete": {id:
        missing parents}}`, the latter naming the rollouts still incomplete at the bound."""
        body = {**batch_body(rollout_ids, False, attempt_ids), "wait_complete_s": wait_s}
        return self._request("POST", "/v1/rollouts/spans", json=body, timeout=wait_s + 30, flat_spans=True)

    def rollouts(self, *, limit: int = 100) -> Any:
        """Recent rollouts seen in spans: id, span count, time range, agents and attempts."""
        return self._request("GET", "/v1/rollouts", "rollouts", params={"limit": limit})

    def collector_info(self) -> Any:
        """The collector's OTLP ports and heartbeat interval (what a runner needs besides this URL)."""
        return self._request("GET", "/v1/collector")

    def enqueue(self, rollouts: list[dict[str, Any]]) -> Any:
        """Queue rollouts (`{"input": task, "task_id"?, "group_id"?, "mode"?, "max_attempts"?, "timeout_s"?}`);
        returns their records with the assigned `rollout_id`s. Ids are fixed here (unless given), so a request
        repeated after a broken connection returns the rollouts the first one queued instead of queuing them twice."""
        specs = [spec if spec.get("rollout_id") else {**spec, "rollout_id": f"ro-{uuid.uuid4().hex[:16]}"}
                 for spec in rollouts]  # fmt: skip
        body = {"rollouts": specs, "if_exists": "return"}
        return self._request("POST", "/v1/queue/enqueue", "rollouts", json=body)

    def claim(self, runner_id: str, *, max_attempts: int = 1, wait_s: float = 10.0, run_id: str | None = None) -> Any:
        """Long-poll for work: `{"attempts": [...], "heartbeat_interval_s": s, "run": {"run_id", "state"} | None,
        "live_runs": n}`, empty after `wait_s` without work. The attempts are of one run: `run_id`'s, or (None) the
        oldest claimable rollout's, named in `run`."""
        body = {"runner_id": runner_id, "max": max_attempts, "wait_s": wait_s, "run_id": run_id}
        return self._request("POST", "/v1/queue/claim", json=body, timeout=wait_s + 30, repeatable=False)

    def heartbeat(self, runner_id: str, attempts: list[tuple[str, str]]) -> Any:
        """Keep attempts alive; returns those the runner should stop (timed out or cancelled meanwhile)."""
        body = {"runner_id": runner_id, "attempts": [{"rollout_id": r, "attempt_id": a} for r, a in attempts]}
        return self._request("POST", "/v1/queue/heartbeat", "stop", json=body)

    def complete(
        self,
        rollout_id: str,
        attempt_id: str,
        status: str,
        *,
        error: str | None = None,
        reward: float | None = None,
        cause: str | None = None,
    ) -> Any:
        """Report an attempt `succeeded` or `failed` (`cause`: "infrastructure:..." or "policy:...", why):
        `{"accepted": bool, "rollout_status": ...}`."""
        body = {"rollout_id": rollout_id, "attempt_id": attempt_id, "status": status, "error": error, "reward": reward,
                "cause": cause}  # fmt: skip
        return self._request("POST", "/v1/queue/complete", json=body)

    def complete_many(self, reports: list[dict[str, Any]]) -> Any:
        """Report many attempts in one request (each a dict of `complete`'s arguments); one result per report."""
        return self._request("POST", "/v1/queue/complete", "results", json={"reports": reports})

    def wait_rollouts(self, rollout_ids: list[str], *, timeout: float = 30.0, records: str = "all") -> Any:
        """Block (on the server) until every rollout is final or `timeout`: `{"done": bool, "unfinished":
        {"queuing": n, "running": n}, "rollouts": [...]}`. `records`: which records come back, "all", "final" (the
        final ones only) or "none" (a poller that only counts them)."""
        body = {"rollout_ids": rollout_ids, "timeout_s": timeout, "records": records}
        return self._request("POST", "/v1/queue/wait", json=body, timeout=timeout + 30)

    def cancel(self, rollout_ids: list[str]) -> Any:
        return self._request("POST", "/v1/queue/cancel", "cancelled", json={"rollout_ids": rollout_ids})

    def runner_lost(self, runner_id: str, error: str = "runner process exited") -> Any:
        """Fail a dead runner's running attempts at once (they retry) instead of waiting for heartbeat timeouts."""
        return self._request("POST", f"/v1/queue/runners/{runner_id}/lost", "failed", json={"error": error})

    def rollout(self, rollout_id: str) -> Any:
        """One rollout's state with its attempts."""
        return self._request("GET", f"/v1/rollouts/{rollout_id}")

    def queued_rollouts(self, *, status: str | None = None, limit: int = 100) -> Any:
        params: dict[str, Any] = {"limit": limit, **({"status": status} if status else {})}
        return self._request("GET", "/v1/queue/rollouts", "rollouts", params=params)

    def rollouts_page(
        self, *, order: str = "position", status: str | None = None, after: str | None = None, limit: int = 500
    ) -> Any:
        """One page of every rollout, oldest first (`order="group"`: by group, then position): `{"rollouts": [...],
        "next": cursor}`; pass `after=cursor` for the next page, until `next` is None."""
        params: dict[str, Any] = {"order": order, "limit": limit}
        params.update({key: value for key, value in (("status", status), ("after", after)) if value})
        return self._request("GET", "/v1/queue/rollouts/page", params=params)

    def queue_stats(self, status: str | None = None) -> Any:
        """Rollout counts by status (`status`: that one only, cheap on a large queue)."""
        params = {"status": status} if status else None
        return self._request("GET", "/v1/queue/stats", "counts", params=params)

    def put_resources(self, resources: dict[str, Any], *, run_id: str | None = None) -> Any:
        """Publish a new version of the named resources (JSON form) for a run (None: outside any run); returns the
        version number."""
        body = {"resources": resources, "run_id": run_id}
        return self._request("POST", "/v1/resources", "version", json=body, repeatable=False)

    def resources(self, version: int | str = "latest", *, run_id: str | None = None) -> Any:
        """`{"version", "resources", "created_ns", "run_id"}` of one version, or the latest: the newest on the
        collector, or with `run_id` that run's (a run that published none reads those published outside any run)."""
        return self._request("GET", f"/v1/resources/{version}", params={"run_id": run_id} if run_id else None)

    def start_run(self, run_id: str, *, lease_s: float = 60.0) -> Any:
        """Start a run holding a lease of `lease_s` (renew it: `renew_run`): `{"run", "cancelled"}`, the latter how
        many unfinished rollouts of runs no longer running were cancelled."""
        return self._request("POST", "/v1/runs", json={"run_id": run_id, "lease_s": lease_s})

    def renew_run(self, run_id: str) -> Any:
        """Renew a run's lease; the run as it is now (a `lost` or ended one stays so)."""
        return self._request("POST", f"/v1/runs/{run_id}/renew", "run")

    def end_run(self, run_id: str, state: str = "finished") -> Any:
        """End a run (`finished` or `failed`); its unfinished rollouts are cancelled: `{"run", "cancelled"}`."""
        return self._request("POST", f"/v1/runs/{run_id}/end", json={"state": state})

    def run(self, run_id: str) -> Any:
        return self._request("GET", f"/v1/runs/{run_id}")

    def runs(self, *, state: str | None = None, limit: int = 100) -> Any:
        params: dict[str, Any] = {"limit": limit, **({"state": state} if state else {})}
        return self._request("GET", "/v1/runs", "runs", params=params)


__all__ = ["CollectorCalls", "batch_body", "rollout_params"]
