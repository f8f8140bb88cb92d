"""Runners as Ray actors: the rollouts of one training spread over a Ray cluster's machines.

    trainer = lightning_otel.Trainer(
        runners=lightning_otel.RayRunners(n=8, num_cpus=1, address="auto"),
        collector="http://collector.internal:16686",
        algorithm=..., adapter={"agent_match": "write"},
    )

Each actor is one runner, the same `Runner` a local runner process runs: it claims rollouts from the collector's
queue (exactly once, with local runners and runners started by hand alike), runs the agent and exports its spans over
OTLP to its collector: the trainer's, or the one named for its node in `collectors` (several collectors on one
PostgreSQL share the queue and the spans). Ray places the actors (spread over the nodes by default, or where
`resources` says) and restarts one whose process dies, up to `max_restarts`; the trainer sees the failed call at
once, fails that runner's running attempts (they retry, on any runner) and starts it serving again under a new
runner id. The agent travels to the actors with Ray's cloudpickle; the libraries it imports come from the cluster's
image or from `runtime_env` (Ray's: `{"pip": [...]}`, `{"working_dir": "."}`, ...).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lightning_otel.runner.ray_actor import RunnerActor
from lightning_otel.runtime.ray_address import ray_init_address
from lightning_otel.runtime.restart_budget import RestartBudget

if TYPE_CHECKING:
    from lightning_otel.agent_api.lit_agent import LitAgent
    from lightning_otel.collector.client import Client
    from lightning_otel.runner.runner_options import RunnerOptions

log = logging.getLogger("lightning_otel.runtime.ray_runners")
PLACE_TIMEOUT_S = 300.0  # actors that cannot be placed (or keep failing to start) by then: an error, not a hang


@dataclass
class RayRunners:
    """Where and how many runner actors a `Trainer` starts on Ray (`Trainer(runners=RayRunners(...))`).

    `n` actors, each reserving `num_cpus` and `resources` (Ray custom resources, e.g. `{"rollout_node": 1}` to keep
    them on nodes that have it); `address`: the cluster to join when this process is not connected to one yet
    (`"auto"`, `"head:6379"`; set as `RAY_ADDRESS` for the session, so that VERL's workers join it too; None: the
    Ray this process started or joined, VERL's, or a new local one); `runtime_env`: Ray's
    runtime environment for the actors (pip packages, working_dir, env_vars); `max_restarts`: how often Ray restarts
    an actor whose process died; `collectors`: the collector each actor talks to: one query URL for all, or a mapping
    from node IP address or Ray node id to URL (`"*"`: the rest); unset, the trainer's collector;
    `scheduling_strategy`: Ray's, `"SPREAD"` by default (one actor per node before two on one)."""

    n: int = 2
    num_cpus: float = 1.0
    resources: Mapping[str, float] | None = None
    address: str | None = None
    runtime_env: Mapping[str, Any] | None = None
    max_restarts: int = 3
    collectors: str | Mapping[str, str] | None = None
    scheduling_strategy: Any = "SPREAD"

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("RayRunners(n=...) must be >= 1")
        if self.max_restarts < 0:
            raise ValueError("RayRunners(max_restarts=...) must be >= 0")


@dataclass
class _Actor:
    handle: Any
    name: str
    runner_id: str
    serving: Any  # the ObjectRef of its `serve` call, or of a `where` probe while Ray restarts it
    restarting: bool = False
    since: float = field(default_factory=time.monotonic)  # when its current `serve` call began


class RayRunnerPool:
    """The trainer's runner actors (the `RunnerPool` interface: start, check, stop). `check` sees a `serve` call
    that failed (its actor died): the runner's running attempts are failed at once (they retry) and the actor, once
    Ray has restarted it, serves again under a new runner id; past Ray's `max_restarts` a fresh actor replaces it."""

    def __init__(
        self,
        spec: RayRunners,
        agent: LitAgent,
        client: Client,
        collector_url: str,
        options: RunnerOptions,
        *,
        max_replacements: int,
    ) -> None:
        self.spec = spec
        self.agent = agent
        self.client = client
        self.collector_url = collector_url
        self.options = options
        self.budget = RestartBudget(max_replacements)  # actor deaths ridden out within its window
        self.actors: dict[str, _Actor] = {}
        self._session = uuid.uuid4().hex[:6]
        self._started = 0  # runner ids given
        self._made = 0  # actors made
        self._lock = threading.Lock()
        self._connected_here = False
        self._deferred = False
        self._set_address = False
        self._actor_class: Any = None

    # -- start -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the actors now on the Ray this process is connected to; else at the first `check`, once the
        algorithm had its chance to start or join Ray its way (VERL does, with its runtime environment), and else
        on the Ray at `address` (or a new local one)."""
        import ray

        if ray.is_initialized():
            self._start_actors()
            return
        self._deferred = True
        if self.spec.address and "RAY_ADDRESS" not in os.environ:  # an algorithm that starts Ray (VERL) joins it too
            os.environ["RAY_ADDRESS"] = self.spec.address
            self._set_address = True

    def _start_actors(self) -> None:
        import ray

        self._deferred = False
        if not ray.is_initialized():
            ray.init(address=ray_init_address(self.spec.address), log_to_driver=True, include_dashboard=False)
            self._connected_here = True
        self._check_reachable(ray)
        options: dict[str, Any] = {
            "num_cpus": self.spec.num_cpus,
            "max_restarts": self.spec.max_restarts,
            "max_task_retries": 0,  # a serve call lost with its actor is ours to see (its attempts must fail)
            "max_concurrency": 2,  # serve and stop
            "scheduling_strategy": self.spec.scheduling_strategy,
        }
        if self.spec.resources:
            options["resources"] = dict(self.spec.resources)
        if self.spec.runtime_env:
            options["runtime_env"] = dict(self.spec.runtime_env)
        self._actor_class = ray.remote(RunnerActor).options(**options)
        for _ in range(self.spec.n):
            self._new_actor()
        try:
            wheres = ray.get([actor.handle.where.remote() for actor in self.actors.values()], timeout=PLACE_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(
                f"{self.spec.n} runner actors (num_cpus={self.spec.num_cpus}, resources={self.spec.resources}) did "
                f"not start within {PLACE_TIMEOUT_S:.0f} s: the Ray cluster has no room for them beside what runs "
                f"there already ({ray.available_resources()} free); give the nodes more CPUs or ask for fewer"
            ) from None
        from collections import Counter

        from lightning_otel.runtime.output import terminal

        per_node = Counter(f"{where['node_ip']}/{where['node_id'][:8]}" for where in wheres)
        placed = ", ".join(f"{node} ({count})" for node, count in sorted(per_node.items()))
        terminal().print(f"runners: {len(wheres)} Ray actors on {len(per_node)} node(s): {placed}")

    def _check_reachable(self, ray: Any) -> None:
        """A loopback collector address cannot be reached from another machine's actors: say so before they try."""
        if self.spec.collectors is not None:
            return
        host = urlsplit(self.collector_url).hostname or ""
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            return
        here = ray.util.get_node_ip_address()
        elsewhere = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")} - {here})
        if elsewhere:
            raise ValueError(
                f"the collector's address {self.collector_url} is loopback, and the Ray cluster has nodes on other "
                f'machines ({", ".join(elsewhere)}): start the collector where they reach it (collector="http://'
                'host:16686", or CollectorConfig(host="0.0.0.0")) or name one per node in RayRunners(collectors=...)'
            )

    def _new_runner_id(self, name: str) -> str:
        self._started += 1
        return f"{name}-{self._started}"

    def _new_actor(self) -> None:
        self._made += 1
        name = f"ray-runner-{self._session}-{self._made}"
        handle = self._actor_class.remote(self.agent, self.spec.collectors, self.collector_url, self.options)
        runner_id = self._new_runner_id(name)
        self.actors[name] = _Actor(handle, name, runner_id, handle.serve.remote(runner_id))

    # -- watch -------------------------------------------------------------------------------------------------
    def check(self) -> None:
        """Fail the attempts of a runner whose actor died (they retry now) and have it serve again once Ray has
        restarted it (a fresh actor once Ray gives up on it)."""
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        with self._lock:
            if self._deferred:
                self._start_actors()
            refs = {actor.serving: actor for actor in self.actors.values()}
            if not refs:
                return
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in done:
                actor = refs[ref]
                try:
                    answer = ray.get(ref)
                except ActorUnavailableError:
                    if actor.restarting:  # still coming back: ask again at the next check
                        actor.serving = actor.handle.where.remote()
                        continue
                    self._lost(actor, f"Ray actor {actor.name} died (its process is gone; Ray restarts it)")
                except ActorDiedError as exc:  # Ray will not restart it (max_restarts spent): a fresh one
                    if not actor.restarting:
                        self._lost(actor, f"Ray actor {actor.name} died for good ({exc.__class__.__name__})")
                    log.warning("%s is past Ray's max_restarts=%d: a new actor replaces it", actor.name,
                                self.spec.max_restarts)  # fmt: skip
                    del self.actors[actor.name]
                    self._new_actor()
                    continue
                except RayActorError as exc:
                    self._lost(actor, f"Ray actor {actor.name} died ({exc.__class__.__name__})")
                except Exception as exc:  # the runner itself raised; its actor lives
                    self._lost(actor, f"runner {actor.runner_id} on {actor.name} failed: {exc}")
                    actor.runner_id = self._new_runner_id(actor.name)
                    actor.serving, actor.since = actor.handle.serve.remote(actor.runner_id), time.monotonic()
                    continue
                else:
                    if actor.restarting:  # the probe answered: Ray restarted it; serve under a new runner id
                        actor.restarting = False
                        actor.runner_id = self._new_runner_id(actor.name)
                        actor.serving, actor.since = actor.handle.serve.remote(actor.runner_id), time.monotonic()
                        log.warning("%s is back (pid %s): serving as %s", actor.name, answer["pid"], actor.runner_id)
                        continue
                    self._lost(actor, f"runner {actor.runner_id} stopped on its own (claimed {answer['claimed']})")
                actor.restarting = True
                actor.serving = actor.handle.where.remote()

    def _lost(self, actor: _Actor, reason: str) -> None:
        """Its running attempts fail now (they retry on any runner); past the pool's budget the training stops."""
        failed = self.client.runner_lost(actor.runner_id, reason)
        log.warning("%s; %s running attempts of %s failed and will retry", reason, failed, actor.runner_id)
        self.budget.spend(reason, time.monotonic() - actor.since)

    # -- stop --------------------------------------------------------------------------------------------------
    def stop(self, timeout: float = 15.0) -> None:
        import ray

        actors = list(self.actors.values())
        if ray.is_initialized():  # (the algorithm may have shut down the Ray it started: the actors went with it)
            for actor in actors:
                actor.handle.stop.remote()  # the runner cancels its rollouts, reports them and flushes
            deadline = time.monotonic() + timeout
            pending = [actor.serving for actor in actors]
            while pending and time.monotonic() < deadline:
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=max(0.0, deadline - time.monotonic()))
            for actor in actors:
                ray.kill(actor.handle, no_restart=True)
        for actor in actors:
            try:  # a claim still parked for it returns nothing now
                self.client.runner_lost(actor.runner_id, "runner actor stopped at the end of its Trainer session")
            except Exception as exc:  # the collector may be gone already
                log.debug("could not mark %s lost: %s", actor.runner_id, exc)
        self.actors.clear()
        if self._connected_here and ray.is_initialized():
            ray.shutdown()
        if self._set_address:
            os.environ.pop("RAY_ADDRESS", None)
