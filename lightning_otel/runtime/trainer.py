"""`Trainer`: one object that runs a training: collector, runner processes, algorithm.

    trainer = lightning_otel.Trainer(
        n_runners=2,
        algorithm=lightning_otel.Baseline(),            # or VERL(config), or your Algorithm
        adapter={"agent_match": "write"},               # which agents' LLM calls become samples
        initial_resources={"main_llm": lightning_otel.LLM("http://127.0.0.1:8000/v1", "my-model")},
    )
    trainer.fit(sql_agent, train_dataset, val_dataset)
    trainer.dev(sql_agent, dev_dataset)                  # a few tasks, everything printed: check before GPU hours

The run's settings and the runners' are values (`RunSettings`, `RunnerOptions`):

    Trainer(n_runners=2, algorithm=algo,
            settings=RunSettings(max_attempts=5, span_wait_s=60),          # the run: attempts, waits, its id
            runner_options=RunnerOptions(max_concurrency=4, capture_content=True))   # what each runner does

Agent Lightning's spellings work too (`n_workers`, `max_tasks`, `dev(agent, train_dataset, val_dataset=...)`), with a
DeprecationWarning where ours differ; see the docs' "Coming from Agent Lightning".

`collector` is a running `agl-otel-collector`'s query URL (`"http://host:16686"`: its store keeps the spans and the
queue, and runners started elsewhere with `lightning-otel runner` join the training), or the embedded collector's
`CollectorConfig` (`CollectorConfig.embedded(http_port=4318)`: the OTLP/HTTP port an agent service started elsewhere
sends spans to; `store_url=...` a store to keep); with neither the trainer starts an embedded collector on free
loopback ports with SQLite in a temporary directory. `RunSettings.policy_notify_file` (default
`$LLM_SERVER_NOTIFY_FILE`) is where the policy's address is written each time it is published.

With runners started elsewhere, a batch that no runner claims is reported after 10 s and, with
`RunSettings.no_runner_timeout_s`, ends the training with `NoRunner`; when the training ends, the trainer publishes
it on the collector and those runners stop (unless started with `--keep-serving`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import sys
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_otel.adapters.triplets import TraceToTriplet
from lightning_otel.agent_api.agent_loading import as_agent
from lightning_otel.agent_api.lit_agent import LitAgent, check_agent
from lightning_otel.agent_api.policy_address import notify_file_from_env
from lightning_otel.agent_api.resources import LLM, ProxyLLM
from lightning_otel.collector.client import Client
from lightning_otel.runner.runner_options import RunnerOptions
from lightning_otel.runtime.algorithm import Algorithm, Baseline, BaselineResult
from lightning_otel.runtime.batch_progress import BatchProgress
from lightning_otel.runtime.ray_runners import RayRunnerPool, RayRunners
from lightning_otel.runtime.runner_pool import RunnerPool
from lightning_otel.runtime.trainer_arguments import settings_from_keywords
from lightning_otel.runtime.training_run import RunSettings, TrainingRun, new_run_id

if TYPE_CHECKING:
    from lightning_otel.collector.server import CollectorConfig

log = logging.getLogger("lightning_otel.runtime.trainer")


class Trainer:
    """Runs a training: a collector (a running one, or embedded), runner processes executing the agent, and the
    algorithm over the datasets (`fit`), or a dry run that prints everything (`dev`).

    `n_runners` runner processes (0: only runners started elsewhere, `lightning-otel runner`); `algorithm` (default
    `Baseline()`); `adapter` (`TraceToTriplet` or its keyword dict: `{"agent_match": "write"}`);
    `initial_resources` (the LLMs and prompts the agent reads); `collector`: a running collector's query URL or the
    embedded one's `CollectorConfig`; `settings`: the run's `RunSettings` (attempts, timeouts, the late-span wait,
    the policy's notify file, riding out an unreachable collector, the run's id: a new one for each session, `fit`
    or `dev`, unless it names one); `runner_options`: the runners' `RunnerOptions` (concurrency, message content,
    `max_rollouts`, per-rollout `limits`); `runners`: `RayRunners(...)` runs the runners as actors on a Ray cluster
    instead of local processes (`n_runners` is then its `n`); `progress`: a live display (default: on a terminal);
    `auth_token`: the collector's bearer token. Agent Lightning's `n_workers`, `max_tasks` and `max_rollouts` are
    accepted, and the keywords from before 0.2 (`max_attempts=`, `max_concurrency=`, ...) work until 0.3 with a
    DeprecationWarning naming their place (`lightning_otel.runtime.trainer_arguments`).
    """

    def __init__(
        self,
        n_runners: int | None = None,
        algorithm: Algorithm | None = None,
        adapter: TraceToTriplet | Mapping[str, Any] | None = None,
        initial_resources: Mapping[str, Any] | None = None,
        collector: str | CollectorConfig | None = None,
        *,
        settings: RunSettings | None = None,
        runner_options: RunnerOptions | None = None,
        runners: RayRunners | None = None,
        progress: bool | None = None,
        auth_token: str | None = None,
        **agent_lightning: Any,
    ) -> None:
        if runners is not None and not isinstance(runners, RayRunners):
            raise TypeError(f"runners= takes a RayRunners(...), not {runners!r} (local processes: n_runners=)")
        if runners is not None and n_runners not in (None, runners.n):
            raise ValueError(f"n_runners={n_runners} and runners={runners!r}: give the number in RayRunners(n=...)")
        n_runners = _renamed("n_workers", agent_lightning.pop("n_workers", None), "n_runners", n_runners, default=1)
        settings, runner_options = settings_from_keywords(agent_lightning, settings, runner_options)
        if agent_lightning:
            raise TypeError(f"Trainer() got unexpected keyword arguments {sorted(agent_lightning)}")
        if n_runners < 0:
            raise ValueError("n_runners must be >= 0 (0: only runners started elsewhere)")
        if runners is not None:
            if runner_options.max_rollouts is not None:
                raise ValueError("max_rollouts is for local runner processes; RayRunners runs until the training ends")
            n_runners = runners.n
        self.runners = runners
        self.n_runners = n_runners
        self.algorithm = algorithm or Baseline()
        self.adapter = TraceToTriplet.from_config(adapter)
        if self.adapter.policies is not None and not self.algorithm.policy_per_agent:
            raise ValueError(
                f"agent_match maps agents to the policies {self.adapter.policies.policies}, but "
                f"{type(self.algorithm).__name__} trains one policy: "
                + getattr(self.algorithm, "why_one_policy", "a policy per agent trains with Tinker (LocalEngine, "
                          "RemoteEngine); see the docs' 'A policy per agent' page")
            )  # fmt: skip
        self.initial_resources = dict(initial_resources or {})
        self.auth_token = auth_token or runner_options.auth_token
        # A running collector's URL, or the embedded one's config (SQLite in a temporary directory and free loopback
        # ports by default).
        refuse_embedded_when_unmanaged(collector)
        self.collector, self.embedded = _collector_from(collector, self.auth_token)
        if self.auth_token is None:  # a collector config's token is the client's too
            self.auth_token = self.embedded.auth_token
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.collector_url: str | None = None
        self.settings = replace(settings, policy_notify_file=notify_file_from_env(settings.policy_notify_file))
        # Message content on the runners' LLM spans: asked for, or needed by the algorithm (SFT trains on it).
        capture = runner_options.capture_content
        if capture is None and self.algorithm.needs_message_content:
            capture = True
        # the runners' settings, one value for local processes and Ray actors alike
        self.runner_options = replace(runner_options, auth_token=self.auth_token, capture_content=capture)

    def fit(
        self, agent: Any, train_dataset: Sequence[Any] | None = None, val_dataset: Sequence[Any] | None = None
    ) -> Any:
        """Run the algorithm over the datasets with `n_runners` runner processes executing `agent` (or a
        "package.module:name" string; with `n_runners=0` it is not imported here: runners started elsewhere run it)."""
        with self._session(as_agent(agent, import_spec=self.n_runners > 0)) as run:
            return self.algorithm.run(run, train_dataset, val_dataset)

    def dev(
        self,
        agent: Any,
        train_dataset: Sequence[Any] | None = None,
        *,
        val_dataset: Sequence[Any] | None = None,
        dev_dataset: Sequence[Any] | None = None,
        n_tasks: int | None = None,
        print_spans: bool = True,
        gateway: bool = False,
    ) -> BaselineResult:
        """Run the tasks given through a Baseline (no training) and print every rollout: spans, the samples
        `agent_match` selected, rewards, and why nothing was selected when nothing was.

        `train_dataset` (or `dev_dataset`, the same thing) runs in train mode, `val_dataset` in validation mode;
        `n_tasks` keeps only the first n of each (said loudly). `gateway=True` puts a policy gateway in front of the
        `main_llm` endpoint, as training does, and hands the agents a `ProxyLLM` to it: an agent that is not
        instrumented (a bare service, another language) is dry-run with the samples training would read. Raises
        `AllRolloutsFailed` when no rollout succeeded.
        """
        from lightning_otel.runtime.dev_report import DevReporter
        from lightning_otel.runtime.sample_diagnosis import AllRolloutsFailed, all_failed, failure_summary

        if dev_dataset is not None:
            if train_dataset is not None:
                raise TypeError("dev() got train_dataset and dev_dataset: they are the same, pass one")
            train_dataset = dev_dataset
        train_tasks, val_tasks = list(train_dataset or []), list(val_dataset or [])
        if not train_tasks and not val_tasks:
            raise ValueError("dev() needs tasks: dev(agent, tasks) or dev(agent, val_dataset=tasks)")
        reporter = DevReporter(self.adapter, print_spans=print_spans)
        if n_tasks is not None:
            for label, tasks in (("train", train_tasks), ("val", val_tasks)):
                if len(tasks) > n_tasks:
                    reporter.note(f"dev runs {n_tasks} of the {len(tasks)} {label} tasks given (n_tasks={n_tasks})")
            train_tasks, val_tasks = train_tasks[:n_tasks], val_tasks[:n_tasks]
        batch_size = max(1, min(64, max(len(train_tasks), len(val_tasks))))
        baseline = Baseline(batch_size=batch_size, on_batch=reporter.batch)
        with self._session(as_agent(agent)) as run, contextlib.ExitStack() as stack:
            if gateway:
                stack.enter_context(self._dev_gateway(run))
            result = baseline.run(run, train_tasks, val_tasks)
            reporter.summary(result, late_spans=run.late_spans)  # in the session: late spans are looked for
        if all_failed(result.train + result.val):
            raise AllRolloutsFailed(failure_summary(result.train + result.val))
        return result

    @contextlib.contextmanager
    def _dev_gateway(self, run: TrainingRun, resource: str = "main_llm") -> Iterator[None]:
        """A policy gateway in front of the `resource` LLM's endpoint, published as a ProxyLLM; its spans are in
        the store before each batch is read."""
        from lightning_otel.serving.gateway_run import gateway_for_run

        llm = (self.initial_resources or {}).get(resource)
        if not isinstance(llm, LLM):
            raise ValueError(f"dev(gateway=True) needs an LLM resource {resource!r} in initial_resources")
        sampling = dict(llm.sampling_parameters)
        served = gateway_for_run(run, [llm.endpoint], sampling=sampling, validation_sampling=sampling, model=llm.model)
        with served as (_, server):
            proxy = ProxyLLM(server.base_url, llm.model, sampling_parameters=sampling, api_key=llm.api_key)
            run.update_resources({**self.initial_resources, resource: proxy})  # type: ignore[dict-item]
            yield

    @contextlib.contextmanager
    def _session(self, agent: LitAgent) -> Iterator[TrainingRun]:
        check_agent(agent)
        if self.n_runners and self.runners is None:  # Ray's cloudpickle sends what pickle cannot
            try:
                pickle.dumps(agent)
            except Exception as exc:
                raise TypeError(
                    f"the agent {agent!r} cannot be sent to runner processes ({exc}); define it at module level "
                    "(not inside a function) so runners can import it"
                ) from exc
        with contextlib.ExitStack() as stack:
            url = self.collector or stack.enter_context(self._embedded_collector())
            self.collector_url = url
            retry_for_s = self.settings.collector_retry_s
            client = stack.enter_context(Client(url, auth_token=self.auth_token, retry_for_s=retry_for_s))
            settings = replace(
                self.settings,
                run_id=self.settings.run_id or new_run_id(),  # each session a run of its own unless one is named
                # runners of our own may take a while to import a heavy agent; runners elsewhere may not exist
                no_runner_warning_s=60.0 if self.n_runners else 10.0,
                runner_slots=self.n_runners * self.runner_options.max_concurrency or None,
            )
            # this session's runners serve its run only, and stop when it ends (however the trainer ends)
            options = replace(self.runner_options, run_id=settings.run_id)
            pool: RunnerPool | RayRunnerPool
            if self.runners is not None:
                pool = RayRunnerPool(self.runners, agent, client, url, options,
                                     max_replacements=max(3, 3 * self.n_runners))  # fmt: skip
            else:
                pool = RunnerPool(agent, client, url, options, n_runners=self.n_runners,
                                  max_restarts=max(3, 3 * self.n_runners))  # fmt: skip
            shown = self.progress and not self.algorithm.shows_progress  # one live display at a time
            progress = stack.enter_context(BatchProgress(enabled=shown))
            run = TrainingRun(client, self.adapter, settings, on_progress=progress.update, check_runners=pool.check)
            # The run holds a lease on the collector while this session lives; its rollouts and resources are its
            # own, so other trainings and dry runs on a shared collector go on untouched.
            run.start()
            state = "failed"
            try:
                if self.initial_resources:
                    run.update_resources(self.initial_resources)
                pool.start()
                stack.callback(pool.stop)
                yield run
                state = "finished"
            finally:
                if state == "failed":  # perhaps because the collector is gone: do not wait minutes more
                    client.retry_for_s = min(client.retry_for_s, 10.0)
                with contextlib.suppress(Exception):  # its unfinished rollouts are cancelled; runners serving it stop
                    run.finish(state)

    @contextlib.contextmanager
    def _embedded_collector(self) -> Iterator[str]:
        from lightning_otel.collector.server import EmbeddedCollector

        with contextlib.ExitStack() as stack:
            config = self.embedded
            if config.store_url is None:  # a store for this run only
                directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="agl-trainer-"))
                config = replace(config, store_url=f"sqlite:///{Path(directory) / 'collector.sqlite3'}")
            addresses = stack.enter_context(EmbeddedCollector(config))
            log.info("embedded collector: %s", " ".join(addresses.lines()))
            yield addresses.query


def refuse_embedded_when_unmanaged(collector: object) -> None:
    """Agent Lightning's switch `AGL_MANAGED_STORE=0`: never ignored, never an embedded store behind its back (an
    embedded collector's config counts as one)."""
    if os.environ.get("AGL_MANAGED_STORE", "").strip().lower() in ("0", "false", "no") and not isinstance(
        collector, str
    ):
        raise ValueError(
            "AGL_MANAGED_STORE=0: this training starts no collector of its own, and none was given: pass the running "
            "one's query URL, Trainer(collector='http://localhost:9999') or --collector http://localhost:9999 "
            "(`agl store --port 9999` starts one)"
        )


def _collector_from(
    collector: str | CollectorConfig | None, auth_token: str | None
) -> tuple[str | None, CollectorConfig]:
    """(a running collector's URL or None, the embedded collector's config)."""
    from lightning_otel.collector.server import CollectorConfig

    if isinstance(collector, CollectorConfig):
        return None, collector
    return collector, CollectorConfig.embedded(auth_token=auth_token)


def _renamed(old: str, old_value: Any, new: str, new_value: Any, *, default: Any) -> Any:
    """Agent Lightning's older argument name, mapped to ours with a DeprecationWarning."""
    if old_value is None:
        return default if new_value is None else new_value
    warnings.warn(f"Trainer({old}=...) is Agent Lightning's spelling: use {new}", DeprecationWarning, stacklevel=3)
    if new_value is not None and new_value != old_value:
        raise TypeError(f"Trainer got {old}={old_value!r} and {new}={new_value!r}: pass {new} only")
    return old_value


__all__ = ["Trainer", "refuse_embedded_when_unmanaged"]
