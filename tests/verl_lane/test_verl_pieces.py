"""The VERL integration's pieces, fast: verl config composition, the CPU backend's registration in a fresh process,
samples and metrics from a batch of rollouts, mini-batch planning, and padding to a row-count-dependent multiple."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

import lightning_otel as agl
from lightning_otel.adapters.diagnostics import RolloutDiagnostics
from lightning_otel.adapters.triplets import AdaptedRollout, Triplet
from lightning_otel.runtime.rollout_batch import BatchResult, RolloutBatch
from lightning_otel.training.verl import config_checks
from lightning_otel.training.verl.batch import BatchShape, NoTrainableRows, Sample, build_batch
from lightning_otel.training.verl.config import compose_verl_config
from lightning_otel.training.verl.trainer import (
    mini_batch_plan,
    rollout_level_grpo,
    rows_with_gradient,
    samples_from,
    weigh_negative_advantages,
)


def test_config_layers_verl_defaults_cpu_defaults_user_keys_then_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    user = {"actor_rollout_ref": {"rollout": {"n": 8}, "actor": {"strategy": "fsdp"}}, "data": {"train_batch_size": 3}}
    config = compose_verl_config(user, overrides=["data.train_batch_size=5", "+trainer.extra_key=[1,2]"], cpu=True)
    assert config.actor_rollout_ref.rollout.name == "hf"  # CPU default
    assert config.actor_rollout_ref.actor.strategy == "fsdp"  # the user's key beats the CPU default
    assert config.actor_rollout_ref.rollout.n == 8
    assert config.data.train_batch_size == 5 and list(config.trainer.extra_key) == [1, 2]  # overrides last, typed
    assert config.algorithm.gamma == 1.0  # verl's own defaults underneath
    assert config.reward.num_workers == 0  # the runners generate; no verl agent-loop or reward-loop workers
    for role in (config.actor_rollout_ref.actor, config.actor_rollout_ref.ref):  # float32 like the CPU sampler
        assert role.fsdp_config.mixed_precision.param_dtype == "fp32"
    monkeypatch.setattr(config_checks, "engine_installed", lambda name: True)  # as on a GPU machine with vLLM
    gpu = compose_verl_config({"trainer": {"n_gpus_per_node": 4}}, cpu=False)
    assert gpu.actor_rollout_ref.rollout.name == "vllm" and gpu.trainer.device == "cuda"
    assert gpu.actor_rollout_ref.rollout.tensor_model_parallel_size == 1 and gpu.trainer.n_gpus_per_node == 4
    with pytest.raises(ValueError, match="key=value"):
        compose_verl_config({}, overrides=["data.train_batch_size"], cpu=True)


def test_the_cpu_backend_registers_through_verls_plugin_points_in_a_fresh_process() -> None:
    probe = """
import json, os, torch.distributed as dist
import verl
from verl.utils.device import get_device_name, get_nccl_backend, get_device_id
from verl.workers.rollout.replica import get_rollout_replica_class
from verl.workers.rollout.base import get_rollout_class
import verl.workers.engine_workers as workers
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29561")
workers.initialize_global_process_group_ray()   # verl's own call: a gloo group, not "cpu:gloo,cpu:gloo"
print(json.dumps({"device": get_device_name(), "backend": get_nccl_backend(), "id": get_device_id(),
    "replica": get_rollout_replica_class("hf").__name__, "rollout": get_rollout_class("hf", "async").__name__,
    "group": dist.get_backend(), "engine_device": os.environ.get("VERL_ENGINE_DEVICE")}))
"""
    env = {**os.environ, "VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_MODULES": "lightning_otel.training.verl.cpu"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "device": "cpu", "backend": "gloo", "id": "cpu", "replica": "HFReplica", "rollout": "HFServerAdapter",
        "group": "gloo", "engine_device": "cuda",
    }  # fmt: skip


def triplet(rollout_id: str, agent: str, response_id: str) -> Triplet:
    return Triplet([1, 2, 3], [4, 5], [-0.1, -0.2], [1, 1], None, {}, agent, rollout_id, "at-1", [response_id], ["s"])


def test_samples_carry_the_rollouts_reward_and_group_and_metrics_count_what_was_left_out() -> None:
    records = [
        {"rollout_id": "r1", "group_id": "b/t1", "status": "succeeded", "reward": 1.0, "attempts": 1},
        {"rollout_id": "r2", "group_id": "b/t1", "status": "succeeded", "reward": 0.0, "attempts": 2},
        {"rollout_id": "r3", "group_id": "b/t2", "status": "succeeded", "reward": 0.5, "attempts": 1},
        {"rollout_id": "r4", "group_id": "b/t2", "status": "succeeded", "reward": 0.5, "attempts": 1},
        {"rollout_id": "r5", "group_id": "b/t2", "status": "succeeded", "reward": None, "attempts": 1},
        {"rollout_id": "r6", "group_id": "b/t2", "status": "failed", "reward": None, "attempts": 3},
    ]
    calls = {"r1": [("write", "c1"), ("rewrite", "c2")], "r2": [("write", "c3")], "r3": [("write", "c4")],
             "r4": [("write", "c5")], "r5": [("write", "c6")]}  # fmt: skip
    adapted = {
        rollout: AdaptedRollout([triplet(rollout, *call) for call in made], None, RolloutDiagnostics(rollout))
        for rollout, made in calls.items()
    }  # no final reward in the traces: the queue's record has it (r5: none at all)
    result = BatchResult(RolloutBatch("b", "train", [r["rollout_id"] for r in records], []), records, {}, adapted)
    samples, metrics = samples_from(result)
    assert [(s.triplet.response_ids[0], s.reward, s.uid) for s in samples] == [
        ("c1", 1.0, "b/t1"), ("c2", 1.0, "b/t1"), ("c3", 0.0, "b/t1"), ("c4", 0.5, "b/t2"), ("c5", 0.5, "b/t2"),
    ]  # fmt: skip
    assert metrics["rollout/without_reward"] == 1 and metrics["rollout/failed"] == 1
    assert metrics["rollout/zero_variance_groups"] == 1  # t2: both rewarded rollouts got 0.5
    assert metrics["rollout/triplets_per_rollout"] == 5 / 4 and metrics["rollout/retried"] == 2
    by_agent, _ = samples_from(result, group_by_agent=True)
    assert {s.uid for s in by_agent} == {"b/t1/write", "b/t1/rewrite", "b/t2/write"}


@pytest.mark.parametrize(
    ("rows", "target", "unit", "plan"),
    [
        (5, 8, 1, (1, 1)),
        (5, 4, 8, (1, 8)),
        (17, 8, 2, (2, 4)),
        (40, 8, 4, (5, 20)),
        (1, 64, 1, (1, 1)),
        (16, 4, 8, (2, 16)),
        (17, 4, 8, (3, 24)),
    ],  # multi-call rollouts: no mini-batch of padding only
)
def test_mini_batch_plan(rows: int, target: int, unit: int, plan: tuple[int, int]) -> None:
    assert mini_batch_plan(rows, target, unit) == plan


def test_rows_are_padded_to_a_multiple_that_depends_on_the_row_count() -> None:
    shape = BatchShape(max_prompt_length=8, max_response_length=4, pad_token_id=0)
    samples = [Sample(triplet(f"r{i}", "write", f"c{i}"), float(i), "g") for i in range(5)]
    batch, stats = build_batch(samples, shape, row_multiple=lambda rows: mini_batch_plan(rows, 4, 8)[1])
    assert (len(batch), stats.rows, stats.padding_rows) == (8, 5, 3)
    assert batch.batch["response_mask"][5:].sum() == 0  # padding trains nothing
    with pytest.raises(NoTrainableRows) as empty:
        build_batch([], shape)
    assert empty.value.stats.rows == 0


def test_grpo_per_rollout_counts_a_multi_row_rollout_once_in_its_group() -> None:
    shape = BatchShape(max_prompt_length=8, max_response_length=4, pad_token_id=0)
    # Group g: rollout A (reward 1) gave three rows, rollout B (reward 0) one; group h: one rollout (no signal).
    samples = [Sample(triplet("A", "write", f"a{i}"), 1.0, "g") for i in range(3)]
    samples += [Sample(triplet("B", "write", "b"), 0.0, "g"), Sample(triplet("C", "write", "c"), 0.5, "h")]
    batch, _ = build_batch(samples, shape)
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    advantages = rollout_level_grpo(batch).batch["advantages"]
    per_row = [round(float(row[0]), 4) for row in advantages]
    assert per_row[:4] == [0.7071, 0.7071, 0.7071, -0.7071]  # +-(1 - 0.5) / std([1, 0]): A and B weigh alike
    assert per_row[4] == 0.5  # verl: a group of one keeps its raw reward
    assert torch.equal(advantages != 0, (batch.batch["response_mask"] != 0) & (advantages != 0))  # sampled only
    # verl's row-level GRPO on the same rows: A's three rows pull the group mean to 0.75.
    rows, _ = compute_grpo_outcome_advantage(
        batch.batch["token_level_rewards"], batch.batch["response_mask"], batch.non_tensor_batch["uid"]
    )
    assert round(float(rows[3, 0]), 2) == -1.5


def test_negative_advantages_are_weighed_and_positive_ones_kept() -> None:
    shape = BatchShape(max_prompt_length=8, max_response_length=4, pad_token_id=0)
    rewards = {"A": 1.0, "B": 0.0, "C": 0.0}
    samples = [Sample(triplet(name, "write", name), reward, "g") for name, reward in rewards.items()]
    batch, _ = build_batch(samples, shape)
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    plain = rollout_level_grpo(batch).batch["advantages"].clone()
    weighed = weigh_negative_advantages(batch, 0.25).batch["advantages"]
    assert plain[0, 0] > 0 and plain[1, 0] < 0  # the better rollout up, the worse down
    assert torch.equal(weighed[0], plain[0])  # better than the group: as GRPO says
    assert torch.allclose(weighed[1:], plain[1:] * 0.25)  # worse: a quarter of the push down
    assert torch.equal(weigh_negative_advantages(batch, 0.0).batch["advantages"][1:], torch.zeros_like(plain[1:]))


def policy_gradient(batch, loss_agg_mode: str, global_batch_size: int) -> torch.Tensor:
    """The gradient verl's engine takes for `batch` (vanilla clipped loss; the normaliser counted from the rows it
    is given, `global_batch_size` passed in), with respect to a toy policy's logits."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla

    torch.manual_seed(0)
    logits = torch.randn(len(batch), 4, 5)  # the same toy policy whatever rows are passed
    logits = logits[torch.as_tensor(batch.non_tensor_batch["row"].astype(int))].requires_grad_(True)
    responses = batch.batch["responses"] % 5
    log_prob = torch.log_softmax(logits, -1).gather(-1, responses[..., None])[..., 0]
    mask = batch.batch["response_mask"]
    info = {"dp_size": 1, "batch_num_tokens": int(mask.sum()), "global_batch_size": global_batch_size}
    config = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None,
                               "clip_ratio_c": 3.0, "global_batch_info": info})  # fmt: skip
    old = log_prob.detach() + 0.3 * torch.sin(torch.arange(log_prob.numel()).view_as(log_prob))  # some clipped
    loss, _ = compute_policy_loss_vanilla(old, log_prob, batch.batch["advantages"], mask, loss_agg_mode, config)
    loss.backward()
    return logits.grad


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"])
def test_rows_with_zero_advantage_are_left_out_of_the_update_without_changing_it(loss_agg_mode: str) -> None:
    import numpy as np

    shape = BatchShape(max_prompt_length=8, max_response_length=4, pad_token_id=0)
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # group g moves, h and k are still
    groups = ["g"] * 4 + ["h"] * 4 + ["k"] * 4
    pairs = enumerate(zip(rewards, groups, strict=True))
    samples = [Sample(triplet(f"r{i}", "write", f"c{i}"), reward, group) for i, (reward, group) in pairs]
    batch, _ = build_batch(samples, shape)
    batch.batch["response_mask"][1::2, 1] = 0  # unequal lengths (two tokens, one): the token count matters
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
    batch = weigh_negative_advantages(rollout_level_grpo(batch), 0.0)  # 1 of 12 rows moves
    batch.non_tensor_batch["row"] = np.arange(12, dtype=object)
    subset, scale = rows_with_gradient(batch, unit=2, loss_agg_mode=loss_agg_mode)
    assert len(subset) == 2 and int(subset.non_tensor_batch["row"][0]) == 0  # the mover and one still row
    subset.batch["advantages"] = subset.batch["advantages"] * scale
    full = policy_gradient(batch, loss_agg_mode, global_batch_size=12)
    part = policy_gradient(subset, loss_agg_mode, global_batch_size=12)
    assert full[0].abs().sum() > 0 and full[1:].abs().sum() == 0
    assert torch.allclose(part[0], full[0], atol=1e-7)  # the same update from a sixth of the rows
    # All still: one unit is kept, so the optimizer steps as it would; nothing to save: None.
    batch.batch["advantages"].zero_()
    assert len(rows_with_gradient(batch, unit=4, loss_agg_mode=loss_agg_mode)[0]) == 4
    assert rows_with_gradient(batch, unit=12, loss_agg_mode=loss_agg_mode) is None
    assert rows_with_gradient(batch, unit=2, loss_agg_mode="seq-mean-token-sum-norm") is None


def test_a_negative_advantage_weight_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="negative_advantage_weight"):
        agl.VERL({}, negative_advantage_weight=-1.0)


def test_the_gateway_is_advertised_by_a_name_runners_can_reach() -> None:
    import socket

    from lightning_otel.serving.gateway_run import advertised_url

    assert advertised_url("127.0.0.1", 8080) == "http://127.0.0.1:8080/v1"
    assert advertised_url("0.0.0.0", 8080) == f"http://{socket.getfqdn()}:8080/v1"
    assert advertised_url("::1", 9) == "http://[::1]:9/v1"
