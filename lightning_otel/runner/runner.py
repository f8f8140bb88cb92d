"""Runners: processes that claim rollouts from the collector's queue and run the agent on them.

One runner runs many rollouts at once (asyncio; sync agents in a thread pool of the same size), each inside
`lightning_otel.rollout_context(rollout_id, attempt_id)`. After the agent returns, its spans are flushed to the
collector before the attempt is reported done, so a trainer that sees `succeeded` can read every span. The
rollout's slot is free as soon as its agent returns: the flush and the report go in the background, together with
those of the runner's other rollouts that end within `REPORT_GATHER_S`. A crash in
the agent is a failed attempt (the queue retries it up to `max_attempts`); a runner that dies stops sending
heartbeats and its attempts time out (or fail at once when the trainer that started it sees it exit).

    lightning-otel runner --collector http://trainer-host:16686 --agent my_pkg.agents:sql_agent --concurrency 32
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lightning_otel import semconv
from lightning_otel.agent_api.lit_agent import LitAgent, Rollout, rollout_method
from lightning_otel.agent_api.resources import llm_endpoints, resources_from_json
from lightning_otel.capture.reward import emit_reward, recording_rewards
from lightning_otel.capture.rollout_context import rollout_context, stop_attempt
from lightning_otel.capture.tracer import current_provider, get_tracer
from lightning_otel.collector.client import AsyncClient, CollectorError
from lightning_otel.runner.attempt_watch import AttemptObservations, AttemptWatch
from lightning_otel.runner.failure_causes import AttemptOutcome, outcome_of, with_swallowed_failures
from lightning_otel.runner.in_flight_batcher import InFlightBatcher
from lightning_otel.runner.run_follower import RunFollower
from lightning_otel.runner.runner_options import RunnerOptions

log = logging.getLogger("lightning_otel.runner.runner")
STOPPING_RETRY_S = 5.0
# How long a finished rollout's flush and report wait for others of the same runner while its agents still run: one
# flush and one completion request for several rollouts (each costs an HTTP round trip and a store transaction on
# both sides). The slot is already free, so the wait costs no throughput; the last rollout running goes at once.
# A claim for fewer than half the slots waits as long for more of them to free. 50 ms: ~4 rollouts a request at
# 8 slots under `benchmarks/trainer_throughput.py` (20 ms: ~2), and little against an LLM call's latency.
REPORT_GATHER_S = 0.05


@dataclass(slots=True)
class RunnerStats:
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    stopped: int = 0  # cancelled by the queue (timed out, cancelled) or by the runner stopping
    reward_conflicts: int = 0  # returned a reward and emitted rewards too
    errors: list[str] = field(default_factory=list)


def _reward_for_queue(returned: Any, emitted: list[tuple[str, float]]) -> float | None:
    """The rollout's headline reward: the returned one, else the last `primary` reward the agent emitted."""
    if isinstance(returned, dict):
        returned = returned.get("primary")
    if isinstance(returned, (int, float)) and not isinstance(returned, bool):
        return float(returned)
    primary = [value for name, value in emitted if name == "primary"]
    return primary[-1] if primary else None


class Runner:
    """Claims attempts from the collector at `collector_url` and runs `agent` on them (see the module docstring);
    `options` as `RunnerOptions` says; `flush` exports this process's ended spans (our provider's by default)."""

    def __init__(
        self,
        agent: LitAgent,
        collector_url: str,
        options: RunnerOptions | None = None,
        *,
        runner_id: str | None = None,
        flush: Callable[[], object] | None = None,
    ) -> None:
        from lightning_otel.capture.setup import flush as flush_spans

        self.options = options = options or RunnerOptions()
        self.follower = RunFollower(options)  # the run it serves; it stops when that run ends (run_follower)
        self.watch = AttemptWatch(options.limits)  # each attempt's spans, read as they end (attempt_watch)

        self.agent = agent
        self.collector_url = collector_url
        self.runner_id = runner_id or f"runner-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.max_concurrency = options.max_concurrency
        self.stats = RunnerStats()
        flush_spans_now = flush or flush_spans

        async def flush_all(items: list[None]) -> list[None]:
            try:
                await asyncio.to_thread(flush_spans_now)
            except Exception as exc:  # the exporter logs it; a rollout with spans missing shows in diagnostics
                log.warning("flushing spans failed: %s", exc)
            return [None] * len(items)

        # A flush that starts after a rollout's spans ended exports them: rollouts finishing together share one.
        self._flusher: InFlightBatcher[None, None] = InFlightBatcher(
            flush_all, gather_s=REPORT_GATHER_S, more_coming=self._agents_running
        )
        self._reporter: InFlightBatcher[dict[str, Any], dict[str, Any]] | None = None
        names = agent.match_names()
        # The rollout's `invoke_agent {LitAgent}` span, the same for every rollout of this runner.
        self._agent_span_name = semconv.agent_span_name(names[0])
        self._agent_span_attributes = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
            semconv.GEN_AI_AGENT_NAME: names[0],
            semconv.AGL_ROLLOUT_AGENT_NAMES: names,
        }
        self._threads: ThreadPoolExecutor | None = None
        self._running: dict[tuple[str, str], asyncio.Task[None]] = {}  # attempts whose agent runs
        # Attempts whose agent has returned and whose spans and report are on their way (heartbeats cover them).
        self._reporting: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._agent_threads: dict[tuple[str, str], Future[Any]] = {}  # synchronous agents' calls, by attempt
        self._resources: dict[int | None, dict[str, Any]] = {}
        self._stopping: asyncio.Event | None = None
        self._client: AsyncClient | None = None
        self._heartbeat_interval_s = 5.0

    def stop(self, *, collector_gone: bool = False) -> None:
        """Stop claiming and cancel the running rollouts (reported failed, so they retry elsewhere). A stopping
        runner no longer rides out a collector that is gone (it often stopped first): its last reports wait
        `STOPPING_RETRY_S` at most, and none at all when the collector is known gone (`collector_gone`: the trainer
        whose collector it was died)."""
        if self._stopping is not None:
            self._stopping.set()
        if self._client is not None:
            bound = 0.0 if collector_gone else STOPPING_RETRY_S
            self._client.retry_for_s = min(self._client.retry_for_s, bound)

    async def run(self) -> RunnerStats:
        """Claim and run rollouts until `stop()` (or the options' `max_rollouts` claimed and finished)."""
        self._stopping = asyncio.Event()
        _watch_spans(self.watch)
        # Sync rollout methods run here (an agent may be async for training and sync for validation).
        self._threads = ThreadPoolExecutor(self.max_concurrency, "agl-rollout")
        async with AsyncClient(self.collector_url, auth_token=self.options.auth_token) as client:
            self._client = client
            self._reporter = InFlightBatcher(client.complete_many)
            beating = asyncio.create_task(self._heartbeats(client))
            try:
                await self._claim_loop(client, self.options.max_rollouts)
            finally:
                for task in self._running.values():
                    task.cancel()
                await asyncio.gather(*self._running.values(), return_exceptions=True)
                # the reports of rollouts already run still go (a stopping runner's client gives up sooner)
                await asyncio.gather(*self._reporting.values(), return_exceptions=True)
                beating.cancel()
                await asyncio.gather(beating, return_exceptions=True)
                self._threads.shutdown(wait=False, cancel_futures=True)
        return self.stats

    async def _claim_loop(self, client: AsyncClient, max_rollouts: int | None) -> None:
        assert self._stopping is not None
        stopping = asyncio.create_task(self._stopping.wait())
        failed_claims = 0  # in a row
        try:
            while not self._stopping.is_set():
                if max_rollouts is not None and self.stats.claimed >= max_rollouts:
                    if not self._running:
                        return
                    await asyncio.wait([stopping, *self._running.values()], return_when=asyncio.FIRST_COMPLETED)
                    continue
                free = self.max_concurrency - len(self._running)
                if free <= 0:
                    await asyncio.wait([stopping, *self._running.values()], return_when=asyncio.FIRST_COMPLETED)
                    continue
                free = await self._gather_free_slots(stopping, free)
                if max_rollouts is not None:
                    free = min(free, max_rollouts - self.stats.claimed)
                serving = self.follower.serving
                claiming = asyncio.create_task(
                    client.claim(self.runner_id, max_attempts=free, wait_s=self.options.claim_wait_s, run_id=serving)
                )
                await asyncio.wait([stopping, claiming], return_when=asyncio.FIRST_COMPLETED)
                if not claiming.done():
                    claiming.cancel()
                    await asyncio.gather(claiming, return_exceptions=True)
                    return
                try:
                    answer = claiming.result()
                except CollectorError as exc:  # restarting or briefly unreachable: keep the rollouts we run, retry
                    failed_claims += 1
                    # said from the second in a row: a collector back within the second, or a trainer whose death
                    # stops this runner (its embedded collector died with it, the signal may come just after), is not
                    log.log(logging.WARNING if failed_claims > 1 else logging.DEBUG,
                            "claiming failed (%d in a row), retrying in 1 s: %s", failed_claims, exc)  # fmt: skip
                    await asyncio.wait([stopping], timeout=1.0)
                    continue
                failed_claims = 0
                self._heartbeat_interval_s = float(answer.get("heartbeat_interval_s", 5.0))
                stop_why = self.follower.after_claim(answer, busy=bool(self._running))
                if stop_why is not None:  # a runner started for a run that ended as planned says it quietly
                    quiet = self.follower.pinned and self.follower.ended_state != "lost"
                    log.log(logging.INFO if quiet else logging.WARNING, "%s", stop_why)
                    return
                for attempt in answer["attempts"]:
                    self.stats.claimed += 1
                    key = (attempt["rollout_id"], attempt["attempt_id"])
                    task = asyncio.create_task(self._run_attempt(client, attempt), name=f"rollout {key[0]}")
                    self._running[key] = task
                    task.add_done_callback(lambda _, key=key: self._agent_done(key))
        finally:
            stopping.cancel()

    async def _gather_free_slots(self, stopping: asyncio.Task[Any], free: int) -> int:
        """With fewer than half the slots free while others run, wait up to `REPORT_GATHER_S` for more to free, so
        one claim fills several (each claim costs an HTTP round trip and a store transaction on both sides)."""
        wanted = max(2, self.max_concurrency // 2)
        deadline = time.monotonic() + REPORT_GATHER_S
        while free < wanted and self._running and not stopping.done():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await asyncio.wait([stopping, *self._running.values()], timeout=left, return_when=asyncio.FIRST_COMPLETED)
            free = self.max_concurrency - len(self._running)
        return free

    async def _heartbeats(self, client: AsyncClient) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval_s)
            if not self._running and not self._reporting:
                continue
            try:
                stop = await client.heartbeat(self.runner_id, [*self._running, *self._reporting])
            except Exception as exc:  # the collector restarting: try again next beat
                log.warning("heartbeat failed: %s", exc)
                continue
            for item in stop:  # timed out or cancelled on the queue: its result would not be accepted
                task = self._running.get((item["rollout_id"], item["attempt_id"]))
                if task is not None:
                    log.info("stopping rollout %s: it is %s on the queue", item["rollout_id"], item["status"])
                    task.cancel()

    async def _resources_for(self, client: AsyncClient, version: int | None) -> dict[str, Any]:
        if version not in self._resources:
            if version is None:
                self._resources[None] = {}
            else:
                from lightning_otel.capture.settings import register_trainable_endpoint

                found = resources_from_json((await client.resources(version))["resources"])
                for endpoint in llm_endpoints(found):  # the policy's endpoints must return token ids
                    register_trainable_endpoint(endpoint)
                self._resources[version] = found
        return self._resources[version]

    async def _run_attempt(self, client: AsyncClient, attempt: dict[str, Any]) -> None:
        rollout_id, attempt_id = attempt["rollout_id"], attempt["attempt_id"]
        reward, note, raised, stopped = None, None, None, None
        # the attempt's spans are read as they end: a limit that trips stops this task (`attempt_watch`)
        this_task, loop = asyncio.current_task(), asyncio.get_running_loop()
        assert this_task is not None

        def stop(_: str) -> None:  # a limit tripped: no more calls (a thread's too), and the task is cancelled
            stop_attempt(rollout_id, attempt_id)
            loop.call_soon_threadsafe(this_task.cancel)

        seen = self.watch.watch(rollout_id, attempt_id, stop)
        info = Rollout(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            attempt_number=attempt.get("attempt_number", 1),
            task_id=attempt.get("task_id", ""),
            group_id=attempt.get("group_id", ""),
            mode=attempt.get("mode", "train"),
            resources_version=attempt.get("resources_version"),
            metadata=attempt.get("metadata") or {},
            input=attempt["input"],
            runner_id=self.runner_id,
        )
        try:
            resources = await self._resources_for(client, attempt.get("resources_version"))
            reward, note = await self._call_agent(attempt["input"], resources, info)
        except asyncio.CancelledError:
            if seen.tripped is None:
                self.stats.stopped += 1
                stopped = "runner stopped" if self._stopping is not None and self._stopping.is_set() else "stopped"
            else:  # a limit stopped it: a synchronous agent's call under way ends before the attempt is judged
                await self._agent_thread_ended((rollout_id, attempt_id))
        except Exception as exc:
            raised = exc
        outcome = outcome_of(
            reward=reward, note=note, exc=raised, tripped=seen.tripped, stopped=stopped,
            policy_failure_reward=self.options.policy_failure_reward,
        )  # fmt: skip
        if outcome.policy_failure:  # it trains: its reward is in its spans, as an agent's own would be
            async with rollout_context(rollout_id, attempt_id):
                emit_reward(outcome.reward)
        # Spans first, then the report: whoever sees `succeeded` can read the whole rollout. It goes on without
        # this task, which ends now and frees the slot.
        key = (rollout_id, attempt_id)
        reporting = asyncio.create_task(self._finish(client, rollout_id, attempt_id, outcome, seen, raised))
        self._reporting[key] = reporting
        reporting.add_done_callback(lambda _: self._reporting.pop(key, None))

    async def _agent_thread_ended(self, key: tuple[str, str], wait_s: float = 30.0) -> None:
        """Wait (at most `wait_s`) for a stopped attempt's agent thread: its next LLM call is refused, so it ends soon
        after the call it was in, whose span (an outage's error, perhaps) then counts for the attempt."""
        in_thread = self._agent_threads.get(key)
        if in_thread is not None:
            ending = asyncio.wrap_future(in_thread)
            done, _ = await asyncio.wait([ending], timeout=wait_s)
            if done and not ending.cancelled():
                ending.exception()  # taken here: how it ended (RolloutStopped, the call's error) is its spans' to tell

    def agent_calls_in_threads(self) -> int:
        """Synchronous agent calls not returned yet (a stopped runner's hung agents among them)."""
        return sum(1 for in_thread in list(self._agent_threads.values()) if not in_thread.done())

    def _agents_running(self) -> bool:
        return bool(self._running)

    def _agent_done(self, key: tuple[str, str]) -> None:
        self._running.pop(key, None)
        if not self._running:  # the last agent running has returned: the gathered reports go now
            self._flusher.wake()

    async def _finish(
        self, client: AsyncClient, rollout_id: str, attempt_id: str, outcome: AttemptOutcome,
        seen: AttemptObservations, raised: BaseException | None = None,
    ) -> None:  # fmt: skip
        await self._flusher.submit(None)  # every span of the attempt ended (and exported): the watch saw them all
        self.watch.forget(rollout_id, attempt_id)
        stop_attempt(rollout_id, attempt_id, stopped=False)
        outcome = with_swallowed_failures(outcome, seen.infrastructure)
        said = " ".join(str(outcome.error).split())  # a line each (an HTTP error's text spans several)
        if outcome.policy_failure:
            log.warning("rollout %s attempt %s: a policy failure (%s), trained with reward %s: %s", rollout_id,
                        attempt_id, outcome.cause, outcome.reward, said)  # fmt: skip
        elif outcome.cause is not None:
            # the agent's exception with its traceback: in the runner's log (`lightning-otel train -v`: the terminal)
            log.warning("rollout %s attempt %s failed (%s): %s", rollout_id, attempt_id, outcome.cause, said,
                        exc_info=raised)  # fmt: skip
            self.stats.errors.append(outcome.error or outcome.cause)
        if outcome.status == "succeeded":
            self.stats.succeeded += 1
        else:
            self.stats.failed += 1
        assert self._reporter is not None
        report = {
            "rollout_id": rollout_id,
            "attempt_id": attempt_id,
            "status": outcome.status,
            "error": outcome.error,
            "reward": outcome.reward,
            "cause": outcome.cause,
        }
        try:
            await self._reporter.submit(report)
        except Exception as exc:  # the attempt will time out on the queue and be retried
            log.warning("reporting rollout %s failed: %s", rollout_id, exc)

    def _agent_span(self) -> contextlib.AbstractContextManager[Any]:
        """The rollout's `invoke_agent {LitAgent}` span: calls outside any framework agent are this agent's, and
        `agent_match` naming the LitAgent selects the whole rollout (agl.rollout.agent_names)."""
        return get_tracer().start_as_current_span(self._agent_span_name, attributes=self._agent_span_attributes)

    async def _call_agent(self, task: Any, resources: dict[str, Any], info: Rollout) -> tuple[float | None, str | None]:
        method, is_async = rollout_method(self.agent, info.mode)
        with recording_rewards() as emitted:
            async with rollout_context(info.rollout_id, info.attempt_id):
                with self._agent_span():
                    if is_async:
                        returned = await method(task, resources, info)
                    else:
                        context = contextvars.copy_context()
                        assert self._threads is not None
                        in_thread = self._threads.submit(context.run, method, task, resources, info)
                        key = (info.rollout_id, info.attempt_id)
                        self._agent_threads[key] = in_thread  # until the call returns, whoever waits for it
                        in_thread.add_done_callback(lambda _, key=key: self._agent_threads.pop(key, None))
                        returned = await asyncio.wrap_future(in_thread)
                note = None
                if returned is not None and emitted:
                    self.stats.reward_conflicts += 1
                    note = (
                        f"the agent returned a reward ({returned!r}) and also emitted {len(emitted)} with "
                        "emit_reward(); the emitted ones are kept and the returned value is ignored"
                    )
                    log.warning("rollout %s: %s", info.rollout_id, note)
                    return _reward_for_queue(None, emitted), note
                if returned is not None:
                    if not isinstance(returned, (int, float, dict)) or isinstance(returned, bool):
                        raise TypeError(
                            f"rollout() returned {type(returned).__name__}; return a float, a dict of rewards or None"
                        )
                    emit_reward(returned)
                reward = _reward_for_queue(returned, emitted)
                if reward is not None and not math.isfinite(reward):  # it would poison every advantage of its group
                    raise ValueError(f"the agent's reward is {reward}: a reward must be a finite number")
                return reward, note


def _watch_spans(watch: AttemptWatch) -> bool:
    """Put the watch on the provider the runner's spans go through (an SDK one); False where there is none (spans
    disabled): limits and swallowed failures then go unseen, said once."""
    from opentelemetry.sdk.trace import TracerProvider

    provider = current_provider()
    if not isinstance(provider, TracerProvider):
        log.warning("no OpenTelemetry SDK provider in this runner: rollout limits and failed calls are not watched")
        return False
    provider.add_span_processor(watch)
    return True
