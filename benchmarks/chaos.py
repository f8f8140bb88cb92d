"""Through every fault at once: one training on PostgreSQL with two collectors, a runner as a Ray actor and a local
runner process, for a set time, while a nemesis at random intervals kills or freezes what it runs on; then a
checker reads the store and the trainer's records and proves nothing was lost or trained twice.

    python -m benchmarks.chaos [--minutes 30] [--seeds 0 1 2] [--out DIR]   # seeds run side by side
    python -m benchmarks.chaos --quick                                        # 2 minutes, one seed (the tests)

The training is `lightning-otel train` as a user types it (the tiny model, tinker, `--max-staleness 1`, a checkpoint
every step, `--max-minutes`), its agent `benchmarks._chaos_agent` (two LLM calls through the nemesis's fault proxy).
Its collector is the first `agl-otel-collector`; the local runner (`lightning-otel runner --keep-serving`) uses the
second, both on one throwaway PostgreSQL; the Ray runner runs on a Ray head of the run's own.

The nemesis, every few seconds (`--every`), one of: SIGKILL the local runner (its supervisor starts it again 2 s
later) or the Ray runner actor's process (Ray restarts it); SIGSTOP the local runner or a collector for 4-10 s;
SIGKILL a collector (started again on the same ports 3 s later); stop PostgreSQL for 5 s; make the policy answer 503
for 3-8 s, hang each call for 5-20 s (the agent's client gives up at 15 s), or cut the next 1-3 answers halfway; and,
at most every `--trainer-every` seconds and once it has checkpointed since it started, SIGKILL the trainer and run
the same command again with `--resume`.

Beside it, for the same time on the same machine, a fault-free run of the same command and seed: the steps it
makes beyond the chaos run's are what the faults cost, and its reward curve the one to compare with. The checker
proves, from the store (PostgreSQL) and the run folder: every step up to the last recorded (metrics.jsonl and its
span), each of its rollouts a sample or a failure with its cause, trained unless all its groups tied; one sample a
trained rollout; no rollout trained in two steps; every trained sample from a succeeded attempt, with the agent's
two LLM calls stored for it; no span stored twice; each sample's policy version within the staleness bound; each
trainer kill followed by a resume, and each attempt still running on a killed local runner a second later ended
with an infrastructure cause; the mean training reward within 3 standard errors of the fault-free run's. Faults by
kind, steps, rollouts, retries and the causes the store gives are printed and kept in DIR/chaos-seed-N.json. Exits 1
when a check fails. Each seed's folder (DIR/chaos-seed-N/, DIR/fault-free-seed-N/) is replaced by the next run's.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks._chaos_checker import MAX_STALENESS, check, read_records
from benchmarks._chaos_processes import RAY_ENV, ROOT, Child, Collector, RayHead, kill
from lightning_otel.runs.model_export import latest_checkpoint
from lightning_otel.testing.fault_proxy import FaultProxy
from lightning_otel.testing.pg_cluster import ThrowawayPostgres

AGENT = "benchmarks._chaos_agent:chaos_agent"
WORDS = ["fruit", "colour", "river", "city", "tool", "animal", "game", "song", "tree", "metal", "sport", "dish"]
# kind -> weight: how often the nemesis picks it
FAULTS = {"kill_local_runner": 2, "kill_ray_runner": 2, "stop_local_runner": 1, "kill_collector": 2,
          "stop_collector": 1, "stop_database": 1, "policy_503": 2, "policy_hang": 1, "cut_answers": 2}  # fmt: skip


class ChaosRun:
    """One seed's stack, training and nemesis (`faults=False`: the fault-free run of the same command)."""

    def __init__(self, out: Path, seed: int, minutes: float, *, every_s: float, trainer_every_s: float,
                 faults: bool, steps: int | None = None, label: str = "chaos", index: int = 0) -> None:  # fmt: skip
        self.folder = out / f"{label}-seed-{seed}"
        # the previous run's logs and run folder go: its trainer.log's lines were counted as this run's (a resume
        # without a kill), and its checkpoints read as this run's
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.seed, self.minutes, self.every_s, self.trainer_every_s = seed, minutes, every_s, trainer_every_s
        self.faults_on, self.steps, self.index = faults, steps, index
        self.random = random.Random(seed)
        self.faults: list[dict[str, Any]] = []
        self.killed_attempts: list[tuple[str, str]] = []  # (rollout, attempt) running on a killed local runner
        self.run_dir = self.folder / "run"
        self.started = 0.0

    # --- the stack -----------------------------------------------------------------------------------------------
    def start_stack(self) -> None:
        self.postgres = ThrowawayPostgres(fsync=True).start()
        self.store = self.postgres.create_database("chaos")
        self.collectors = [Collector(f"collector-{n}", self.store, self.folder).start() for n in (1, 2)]
        self.ray = RayHead(self.folder, cpus=2, index=self.index).start()
        self.proxy = FaultProxy().__enter__()
        tasks = self.folder / "train.jsonl"
        tasks.write_text("".join(json.dumps({"word": w, "proxy": self.proxy.url}) + "\n" for w in WORDS))
        self.tasks = tasks
        self.local_runs = 0
        self.killed_trainer = False  # a SIGKILL the trainer died of was the nemesis's
        self.local = Child("local-runner", self._local_argv(), self.folder / "local-runner.log",
                           env={"PYTHONPATH": str(ROOT)})  # fmt: skip
        self.trainer = Child("trainer", self._trainer_argv(resume=False), self.folder / "trainer.log",
                             env={"PYTHONPATH": str(ROOT), **RAY_ENV})  # fmt: skip

    def _local_argv(self) -> list[str]:
        self.local_runs += 1
        self.local_id = f"chaos-local-{self.local_runs}"
        return [sys.executable, "-m", "lightning_otel.cli", "runner", "--collector", self.collectors[1].url,
                "--agent", AGENT, "--concurrency", "4", "--keep-serving", "--idle-stop-s", "3600", "--runner-id",
                self.local_id]  # fmt: skip

    def _trainer_argv(self, *, resume: bool) -> list[str]:
        left = self.minutes - (time.monotonic() - self.started) / 60 if self.started else self.minutes
        budget = ["--steps", str(self.steps)] if self.steps else ["--steps", "5000", "--max-minutes",
                                                                  f"{max(left, 0.5):.2f}"]  # fmt: skip
        return [sys.executable, "-m", "lightning_otel.cli", "train", "--model", "tiny", "--algorithm", "tinker",
                "--agent", AGENT, "--train", str(self.tasks), "--agent-match", "writer", *budget,
                "--tasks-per-step", "4", "--group-size", "4", "--max-staleness", str(MAX_STALENESS),
                "--learning-rate", "0.002",
                "--save-every", "1", "--seed", str(self.seed), "--run-dir", str(self.run_dir),
                "--collector", self.collectors[0].url, "--runners-on", "ray", "--ray-address", self.ray.address,
                "--runners", "1", "--runner-cpus", "1", "--rollout-timeout", "120",
                *(["--resume"] if resume else [])]  # fmt: skip

    def stop_stack(self) -> None:
        for child in (self.trainer, self.local, *self.collectors):
            child.end()
        self.proxy.__exit__(None, None, None)
        self.ray.stop()

    # --- the run -------------------------------------------------------------------------------------------------
    def run(self) -> int:
        """The training to its end (restarted with --resume after each kill); returns its exit code."""
        self.started = time.monotonic()
        self.local.start()
        self.trainer.start()
        resumed_from = self._latest_checkpoint()
        next_fault = time.monotonic() + self.every_s
        next_trainer_kill = time.monotonic() + self.trainer_every_s
        quiet_after = self.started + self.minutes * 60 * 0.8  # no trainer kill in the last fifth: it must end
        while True:
            code = self.trainer.process.poll()  # type: ignore[union-attr]
            if code is not None and code != -signal.SIGKILL:
                return code
            if code == -signal.SIGKILL:  # the same command again, with --resume
                if not self.killed_trainer:  # not ours (the kernel's OOM killer?): said, and failed by the checker
                    self._fault("trainer_killed_by_another", lambda: None)
                self.killed_trainer = False
                time.sleep(2.0)
                self.trainer.start(self._trainer_argv(resume=True))
                resumed_from = self._latest_checkpoint()
            if not self.local.alive:  # its supervisor (systemd Restart=always) starts it again
                time.sleep(2.0)
                self.local.start(self._local_argv())
            now = time.monotonic()
            # a trainer is killed once it has checkpointed since it started: on a machine where a start and a step
            # take longer than the interval (round 4: six trainings on two cores), it would never move otherwise
            if (self.faults_on and now >= next_trainer_kill and now < quiet_after and self.trainer.alive
                    and self._latest_checkpoint() > resumed_from):  # fmt: skip
                self.killed_trainer = True
                self._fault("kill_trainer", lambda: self.trainer.signal(signal.SIGKILL))
                next_trainer_kill = now + self.trainer_every_s
            elif self.faults_on and now >= next_fault and now < self.started + self.minutes * 60:
                kind = self.random.choices(list(FAULTS), weights=list(FAULTS.values()))[0]
                getattr(self, kind)()
                next_fault = time.monotonic() + self.random.uniform(0.5, 1.5) * self.every_s
            if time.monotonic() - self.started > self.minutes * 60 + 900:
                self.trainer.signal(signal.SIGKILL)
                raise RuntimeError("the training ran 15 minutes past its time budget")
            time.sleep(0.5)

    def _latest_checkpoint(self) -> int:
        """The step of the run's latest whole checkpoint (0: none yet); a save still being written is not one."""
        latest = latest_checkpoint(self.run_dir / "checkpoints") if (self.run_dir / "checkpoints").is_dir() else None
        return int(latest.name.rsplit("-", 1)[1]) if latest else 0

    def _fault(self, kind: str, act: Any, **detail: Any) -> None:
        at = time.monotonic() - self.started
        act()
        self.faults.append({"kind": kind, "at_s": round(at, 1), **detail})
        print(f"  [{self.folder.name} {at:6.0f} s] {kind} {json.dumps(detail) if detail else ''}", flush=True)

    def _later(self, delay_s: float, then: Any) -> None:
        threading.Timer(delay_s, then).start()

    # --- the nemesis's faults ------------------------------------------------------------------------------------
    def kill_local_runner(self) -> None:
        victim = self.local_id
        self._fault("kill_local_runner", lambda: self.local.signal(signal.SIGKILL), runner=victim)
        # read after the kill (and a report it had sent has had time to commit): what is still running on it then
        # can only end as the infrastructure's failure
        self._later(1.0, lambda: self.killed_attempts.extend(self._running_attempts(victim)))

    def kill_ray_runner(self) -> None:
        pids = self.ray.runner_actor_pids()
        if pids:
            self._fault("kill_ray_runner", lambda: kill(pids[0]), pid=pids[0])

    def stop_local_runner(self) -> None:
        seconds = round(self.random.uniform(4, 10), 1)
        self._fault("stop_local_runner", lambda: self.local.signal(signal.SIGSTOP), seconds=seconds)
        process = self.local.process
        self._later(seconds, lambda: process.poll() is None and kill(process.pid, signal.SIGCONT))  # type: ignore[union-attr]

    def kill_collector(self) -> None:
        victim = self.random.choice(self.collectors)
        self._fault("kill_collector", lambda: victim.signal(signal.SIGKILL), collector=victim.name)
        self._later(3.0, victim.start)

    def stop_collector(self) -> None:
        victim, seconds = self.random.choice(self.collectors), round(self.random.uniform(4, 10), 1)
        self._fault("stop_collector", lambda: victim.signal(signal.SIGSTOP), collector=victim.name, seconds=seconds)
        self._later(seconds, lambda: victim.signal(signal.SIGCONT))

    def stop_database(self) -> None:
        self._fault("stop_database", self.postgres.stop, seconds=5)
        self._later(5.0, self.postgres.start_again)

    def policy_503(self) -> None:
        seconds = round(self.random.uniform(3, 8), 1)
        self._fault("policy_503", lambda: self.proxy.answer_503_for(seconds), seconds=seconds)

    def policy_hang(self) -> None:
        seconds = round(self.random.uniform(5, 20), 1)
        self._fault("policy_hang", lambda: self.proxy.hang_for(seconds), seconds=seconds)

    def cut_answers(self) -> None:
        calls = self.random.randint(1, 3)
        self._fault("cut_answers", lambda: self.proxy.cut_next(calls), calls=calls)

    def _running_attempts(self, runner_id: str) -> list[tuple[str, str]]:
        import psycopg

        try:
            with psycopg.connect(self.store, connect_timeout=3) as connection:
                rows = connection.execute("SELECT rollout_id, attempt_id FROM agl_attempts WHERE runner_id = %s AND "
                                          "status = 'running'", (runner_id,)).fetchall()  # fmt: skip
        except psycopg.Error:
            return []
        return [(rollout, attempt) for rollout, attempt in rows]


def run_seed(out: Path, seed: int, minutes: float, every_s: float, trainer_every_s: float) -> dict[str, Any]:
    """The chaos run and a fault-free run of the same command and seed, side by side for the same time (the machine's
    load the same for both): what the faults cost is the steps the fault-free run made beyond them."""
    chaos = ChaosRun(out, seed, minutes, every_s=every_s, trainer_every_s=trainer_every_s, faults=True, index=2 * seed)
    free = ChaosRun(out, seed, minutes, every_s=every_s, trainer_every_s=trainer_every_s, faults=False,
                    label="fault-free", index=2 * seed + 1)  # fmt: skip
    codes: dict[str, int] = {}
    try:
        for run in (chaos, free):
            run.start_stack()
        threads = [threading.Thread(target=lambda r=run: codes.__setitem__(r.folder.name, r.run())) for run in
                   (chaos, free)]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        chaos.trainer.end()
        chaos.local.end()
        for collector in chaos.collectors:  # every collector up for the reads
            collector.signal(signal.SIGCONT)
            if not collector.alive:
                collector.start()
        records = read_records(chaos)
    finally:
        for run in (chaos, free):
            if hasattr(run, "postgres"):
                run.stop_stack()
                run.postgres.destroy()
    code, free_code = codes.get(chaos.folder.name, -1), codes.get(free.folder.name, -1)
    free_lines = [json.loads(line) for line in (free.run_dir / "metrics.jsonl").read_text().splitlines()]
    free_last = {int(line["step"]): line for line in free_lines if "training/samples" in line}
    free_rewards = [free_last[n]["rollout/reward_mean"] for n in sorted(free_last)]
    report = check(chaos, records, (chaos.folder / "trainer.log").read_text(errors="replace"), free_rewards)
    report.update({"seed": seed, "minutes": minutes, "exit_code": code, "fault_free_exit_code": free_code,
                   "faults": dict(Counter(f["kind"] for f in chaos.faults)), "fault_log": chaos.faults,
                   "proxy": chaos.proxy.counts, "fault_free_steps": len(free_rewards),
                   "fault_free_proxy": free.proxy.counts})  # fmt: skip
    report["checks"].insert(0, {"check": "the training and the fault-free run ended with exit 0",
                                "held": code == 0 and free_code == 0, "saw": f"{code}, {free_code}"})  # fmt: skip
    report["failed_tails"] = {run.folder.name: log_tail(run.folder / "trainer.log")
                              for run, exit_code in ((chaos, code), (free, free_code)) if exit_code != 0}  # fmt: skip
    (out / f"chaos-seed-{seed}.json").write_text(json.dumps(report, indent=1, default=str))
    return report


def say(report: dict[str, Any]) -> None:
    seed, steps, free = report["seed"], report["steps"], report["fault_free_steps"]
    print(f"\nseed {seed}: {report['minutes']:g} min each, {steps} steps through the faults, {free} fault-free "
          f"({steps / max(free, 1):.2f}x)")  # fmt: skip
    print(f"  faults: {json.dumps(report['faults'])}; proxy: {json.dumps(report['proxy'])}; the fault-free run's "
          f"proxy: {json.dumps(report['fault_free_proxy'])}")  # fmt: skip
    print(f"  rollouts: {json.dumps(report['rollouts'])}; attempts {report['attempts']} ({report['retried']} "
          f"retries); samples trained {report['samples']}")  # fmt: skip
    print(f"  causes: {json.dumps(report['causes'])}")
    print(f"  said: {json.dumps(report['visible'])}")
    for item in report["checks"]:
        print(f"  {'ok  ' if item['held'] else 'FAIL'} {item['check']}: {item['saw']}")
    for name, tail in report.get("failed_tails", {}).items():  # why a training did not exit 0, where CI shows it
        print(f"  the last lines of {name}/trainer.log:\n" + "\n".join(f"    | {line}" for line in tail))


def log_tail(path: Path, lines: int = 25) -> list[str]:
    return path.read_text(errors="replace").splitlines()[-lines:] if path.is_file() else ["(no log)"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--every", type=float, default=20.0, help="seconds between faults, on average")
    parser.add_argument("--trainer-every", type=float, default=300.0, help="seconds between trainer kills at least")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "runs" / "chaos")
    parser.add_argument("--quick", action="store_true", help="2 minutes, faults every 8 s, one trainer kill")
    args = parser.parse_args(argv)
    if args.quick:
        args.minutes, args.every, args.trainer_every = 2.0, 8.0, 50.0
    args.out.mkdir(parents=True, exist_ok=True)
    reports: list[dict[str, Any]] = []
    threads = [threading.Thread(target=lambda s=seed: reports.append(
        run_seed(args.out, s, args.minutes, args.every, args.trainer_every))) for seed in args.seeds]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for report in sorted(reports, key=lambda r: r["seed"]):
        say(report)
    failed = len(reports) < len(args.seeds) or any(not c["held"] for r in reports for c in r["checks"])
    print(f"\n{'FAILED' if failed else 'every check held'}: {len(reports)} of {len(args.seeds)} seeds reported")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
