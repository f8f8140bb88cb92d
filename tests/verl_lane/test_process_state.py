"""A `VERL(...).run` on CPU leaves the calling process as it found it: its environment, verl's resolved platform and
registries, and every function or class the CPU backend rebinds (in verl's workers, which end with the run). Run in a
fresh interpreter, two GRPO steps end to end, everything compared before and after. The same run (one verl start
for both: each costs about two minutes on CI's 2 cores) counts failed rollouts: its first step's rollouts all fail,
and that step keeps the policy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import importlib, json, os, sys
sys.path.insert(0, sys.argv[1])
import torch.distributed.fsdp as fsdp
import verl.utils.distributed as distributed
import verl.plugin.platform.platform_manager as platform_manager
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.replica import RolloutReplicaRegistry
import lightning_otel
from lightning_otel.testing.tiny_model import save_tiny_model

TOUCHED = [  # what the CPU backend rebinds or registers (cpu/__init__.py, verl_internals.py), by module and name
    ("verl.utils.distributed", "initialize_global_process_group_ray"),
    ("verl.workers.engine_workers", "initialize_global_process_group_ray"),
    ("verl.checkpoint_engine.base", "initialize_global_process_group_ray"),
    ("torch.distributed.fsdp", "CPUOffloadPolicy"),
    ("verl.utils.fsdp_utils", "CPUOffloadPolicy"),
    ("verl.workers.engine.fsdp.transformer_impl", "CPUOffloadPolicy"),
    ("verl.plugin.platform.platform_manager", "_current_platform"),
]

for module, _ in TOUCHED:  # imported first: importing verl's engines sets an environment variable of its own
    importlib.import_module(module)

def state():
    return {
        "environ": dict(os.environ),
        "bindings": {f"{m}.{n}": id(getattr(importlib.import_module(m), n, None)) for m, n in TOUCHED},
        "platforms": sorted(platform_manager.PlatformRegistry._platforms),
        "replicas": sorted(RolloutReplicaRegistry._registry),
        "rollouts": sorted(map(str, rollout_base._ROLLOUT_REGISTRY)),
    }

before = state()
config = {
    "algorithm": {"adv_estimator": "grpo"},
    "data": {"train_batch_size": 2, "max_prompt_length": 256, "max_response_length": 16, "shuffle": False},
    "actor_rollout_ref": {
        "model": {"path": str(save_tiny_model(sys.argv[2]))},
        "rollout": {"n": 3, "log_prob_micro_batch_size_per_gpu": 4},
        "actor": {"ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 4, "optim": {"lr": 1e-3}},
    },
    "trainer": {"total_training_steps": 2, "val_before_train": False, "test_freq": -1, "save_freq": -1,
                "logger": []},
}
trainer = lightning_otel.Trainer(
    n_runners=1,
    algorithm=lightning_otel.VERL(config, device="cpu"),
    adapter={"agent_match": "solo"},
    initial_resources={"main_llm": lightning_otel.LLM("http://replaced-by-the-gateway/v1", "policy")},
    progress=False,
    settings=lightning_otel.RunSettings(max_attempts=2),
)
failing = [{"question": q, "fail_attempts": 9} for q in ("orders", "refunds")]  # step 1: every attempt fails
# step 2: all succeed; "customers" always scores 1 (a group with nothing to learn), "revenue" is graded
tasks = [*failing, {"question": "customers"}, {"question": "revenue", "graded": True}]
result = trainer.fit("lightning_otel.testing.runtime_agents:flaky_agent", tasks)
after = state()
steps = [{"metrics": record.metrics, "skipped_because": record.skipped_because} for record in result.steps]
print(json.dumps({"before": before, "after": after, "steps": steps}))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("probe")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT), str(folder / "model")],
        cwd=folder, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_verl_run_on_cpu_changes_nothing_in_the_calling_process(report: dict) -> None:
    assert [step["metrics"]["training/skipped_step"] for step in report["steps"]] == [1.0, 0.0]  # a real update ran
    before, after = report["before"], report["after"]
    assert before["bindings"] == after["bindings"]
    assert (before["platforms"], before["replicas"], before["rollouts"]) == (
        after["platforms"], after["replicas"], after["rollouts"],
    )  # fmt: skip
    changed = {key for key in before["environ"].keys() | after["environ"].keys()
               if before["environ"].get(key) != after["environ"].get(key)}  # fmt: skip
    assert not changed, {key: (before["environ"].get(key), after["environ"].get(key)) for key in changed}


def test_failed_rollouts_are_counted_and_a_step_without_samples_keeps_the_policy(report: dict) -> None:
    first, second = report["steps"]
    assert first["metrics"]["rollout/failed"] == 6 and first["metrics"]["rollout/succeeded"] == 0
    assert first["metrics"]["training/skipped_step"] == 1 and first["metrics"]["batch/rows"] == 0
    assert "6 of 6 rollouts did not succeed; first error: RuntimeError: flaky failure" in first["skipped_because"][0]
    assert second["skipped_because"] == []
    assert second["metrics"]["rollout/succeeded"] == 6 and second["metrics"]["training/skipped_step"] == 0
    assert second["metrics"]["training/rollout_probs_diff_max"] < 1e-3  # the policy step 1 kept is the sampler's
    assert second["metrics"]["rollout/zero_variance_groups"] == 1  # "customers": counted, its advantages 0
