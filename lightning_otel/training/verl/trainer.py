"""One GRPO (or PPO, RLOO, ...) step of verl on samples taken from traces, built from verl's own trainer pieces.

verl's `RayPPOTrainer.fit` generates with its agent loop: one row per prompt and rollout. Here generation is the
user's agents running in runners against the policy gateway; their traces, adapted by `agent_match`, give any number
of rows per rollout (multi-turn, multi-agent). Everything after generation is verl's: old log-probs, reference,
values, advantages (`compute_advantage`, any `algorithm.adv_estimator`), critic and actor updates, checkpoints,
weight sync to the rollout replicas, and the tracker (`trainer.logger`: console, wandb, tensorboard, ...).
Needs the `[verl]` extra.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from verl import DataProto
from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, apply_kl_penalty, compute_advantage
from verl.trainer.ppo.utils import Role
from verl.utils import tensordict_utils as tu
from verl.utils.metric import reduce_metrics
from verl.utils.profiler import marked_timer
from verl.utils.py_functional import rename_dict
from verl.workers.utils.padding import left_right_2_no_padding

from lightning_otel.runtime.algorithm import BatchResult, TrainingRun
from lightning_otel.runtime.sample_diagnosis import NothingTrained, why_no_samples
from lightning_otel.serving.gateway import PolicyGateway
from lightning_otel.training.verl.batch import BatchShape, BatchStats, NoTrainableRows, Sample, build_batch

log = logging.getLogger("lightning_otel.verl")


@dataclass(slots=True)
class StepRecord:
    step: int
    metrics: dict[str, float]
    sample_response_ids: list[str] = field(default_factory=list)  # the LLM calls that became trained rows
    sample_agents: dict[str, int] = field(default_factory=dict)  # trained rows per agent name
    rollout_ids: list[str] = field(default_factory=list)  # the step's rollouts (their traces are in the collector)
    skipped_because: list[str] = field(default_factory=list)  # why the step trained nothing (empty: it trained)


@dataclass(slots=True)
class VERLResult:
    """What a `VERL` run did: the metrics of every training step and validation, as logged to verl's trackers."""

    steps: list[StepRecord] = field(default_factory=list)
    validations: list[StepRecord] = field(default_factory=list)
    replica_weight_versions: list[int] = field(default_factory=list)  # CPU replicas: weight syncs each received

    def rewards(self) -> list[float]:
        """Mean training reward per step (NaN where a step had no reward)."""
        return [record.metrics.get("rollout/reward_mean", math.nan) for record in self.steps]


def samples_from(result: BatchResult, *, group_by_agent: bool = False) -> tuple[list[Sample], dict[str, float]]:
    """Training samples of a batch: every selected triplet of a succeeded rollout, with the rollout's outcome reward
    (its final reward) and the task's group (per agent too with `group_by_agent`). Rollouts without a reward or
    without usable token ids are counted and left out."""
    group_of = {record["rollout_id"]: record["group_id"] for record in result.rollouts}
    rewards = result.rewards()
    samples: list[Sample] = []
    without_reward = 0
    rollout_reward_by_group: dict[str, list[float]] = {}
    for rollout_id, adapted in result.adapted.items():
        reward = rewards.get(rollout_id)
        if reward is None:
            without_reward += 1
            continue
        if not adapted.triplets:
            continue
        rollout_reward_by_group.setdefault(group_of[rollout_id], []).append(float(reward))
        for triplet in adapted.triplets:
            uid = group_of[rollout_id] + (f"/{triplet.agent_name}" if group_by_agent else "")
            samples.append(Sample(triplet, float(reward), uid))
    zero_variance = sum(1 for values in rollout_reward_by_group.values() if len(set(values)) <= 1)
    batch = result.metrics()
    trained_rollouts = sum(len(values) for values in rollout_reward_by_group.values())
    metrics = {f"rollout/{key}": float(value) for key, value in batch.items() if key not in ("wall_s", "wait_s")}
    metrics["timing_s/gen_wait"] = result.wait_s  # until every rollout was final
    metrics["timing_s/gen_read_adapt"] = result.wall_s - result.wait_s  # spans in one call, adapted
    metrics.update(
        {
            "rollout/with_samples": float(trained_rollouts),
            "rollout/without_reward": float(without_reward),
            "rollout/triplets_per_rollout": len(samples) / trained_rollouts if trained_rollouts else 0.0,
            "rollout/groups": float(len(rollout_reward_by_group)),
            "rollout/zero_variance_groups": float(zero_variance),
        }
    )
    return samples, metrics


def mini_batch_plan(rows: int, target_rows: int, unit: int) -> tuple[int, int]:
    """(number of mini-batches, row multiple) for `rows` trainable rows: about `target_rows` per mini-batch (verl's
    `ppo_mini_batch_size * rollout.n`), each a multiple of `unit` (data-parallel size x micro-batch size), so the
    batch is padded by less than one unit per mini-batch instead of dropping samples. Never more mini-batches than
    units of real rows: rollouts with several calls give more rows than the target assumes, and a mini-batch of
    padding only would be an optimizer step on nothing (and a NaN loss in the metrics)."""
    count = max(1, min(round(rows / max(target_rows, 1)), math.ceil(rows / max(unit, 1))))
    return count, count * unit


def weigh_negative_advantages(batch: DataProto, weight: float) -> DataProto:
    """Multiply the actor's negative advantages by `weight` (the critic's `returns` stay): 1 is the estimator's own
    update, 0 keeps only the rollouts that did better than their group (positive-sample reinforcement). A small
    policy trained from a warm start can be pushed off by the many pushes-down of its wrong samples; see the
    spider example's README for measurements."""
    advantages = batch.batch["advantages"]
    batch.batch["advantages"] = torch.where(advantages < 0, advantages * weight, advantages)
    return batch


# Loss aggregations whose normaliser we can keep when rows are left out: token-mean divides by the mini-batch's
# response tokens (the kept advantages are rescaled), the seq-mean ones by `global_batch_size` (passed unchanged).
_ROW_SKIPPABLE_AGGREGATIONS = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum")


def rows_with_gradient(batch: DataProto, unit: int, loss_agg_mode: str) -> tuple[DataProto, float] | None:
    """The rows of a one-mini-batch, pure policy-gradient actor update that can move the weights, with the factor
    their advantages must be multiplied by for the update to stay the same; None when nothing would be saved.

    A row whose advantages are all zero (GRPO groups whose rollouts all scored alike; the pushes-down that a
    `negative_advantage_weight` of 0 removes) adds nothing to the policy loss but tokens to its normaliser, so it is
    left out and the others rescaled: the forward and backward passes of still rows are saved, the gradient is the
    same to float rounding. Rows are kept in whole `unit`s (micro-batch x data-parallel size), filled up with still
    rows; at least one unit, so the optimizer still steps (momentum, weight decay) as it would have."""
    if loss_agg_mode not in _ROW_SKIPPABLE_AGGREGATIONS:
        return None
    tokens = batch.batch["response_mask"].bool()
    moving = ((batch.batch["advantages"] != 0) & tokens).any(dim=-1)
    kept = moving.nonzero().flatten().tolist()
    size = max(unit, math.ceil(len(kept) / unit) * unit)
    if size >= len(batch):
        return None
    still = (~moving).nonzero().flatten().tolist()
    kept += still[: size - len(kept)]
    subset = batch.select_idxs(torch.tensor(sorted(kept)))
    scale = 1.0
    if loss_agg_mode == "token-mean":
        scale = float(subset.batch["response_mask"].sum()) / max(float(tokens.sum()), 1.0)
    return subset, scale


def rollout_level_grpo(batch: DataProto, *, norm_adv_by_std: bool = True) -> DataProto:
    """GRPO advantages computed over rollouts, not rows: a rollout that gave several rows (several selected calls)
    counts once in its group's mean and std, then every row of it gets its advantage. verl's own GRPO would weigh
    each rollout by its row count (long trajectories pull the baseline). Uses verl's GRPO function on one entry per
    (group, rollout); sets `advantages` and `returns` on the sampled tokens."""
    import numpy as np
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    scores = batch.batch["token_level_rewards"].sum(dim=-1)
    keys = list(zip(batch.non_tensor_batch["uid"], batch.non_tensor_batch["rollout_id"], strict=True))
    position = {key: index for index, key in enumerate(dict.fromkeys(keys))}
    per_rollout = torch.zeros(len(position), 1)
    for row, key in enumerate(keys):
        per_rollout[position[key], 0] = scores[row]  # rows of one rollout share its reward
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=per_rollout,
        response_mask=torch.ones_like(per_rollout),
        index=np.array([uid for uid, _ in position], dtype=object),
        norm_adv_by_std_in_grpo=norm_adv_by_std,
    )
    per_row = advantages[[position[key] for key in keys], 0]
    batch.batch["advantages"] = per_row[:, None] * batch.batch["response_mask"]
    batch.batch["returns"] = batch.batch["advantages"]
    return batch


class RunnerGeneration:
    """Stands where verl's `AgentLoopManager` would (`rollout.agent.agent_loop_manager_class`): generation is the
    runners' job here, so verl starts no agent-loop workers. Asked to generate, it says so."""

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> RunnerGeneration:
        return cls()

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        raise RuntimeError("with lightning-otel, rollouts are generated by the runners (TraceRayPPOTrainer.fit_traces)")


class TraceRayPPOTrainer(RayPPOTrainer):
    """verl's trainer with generation replaced by runners + traces. Build it like `RayPPOTrainer` (datasets are lists
    of tasks with an identity collate), `init_workers()`, then `fit_traces(run, gateway)`."""

    def fit_traces(
        self,
        run: TrainingRun,
        gateway: PolicyGateway,
        *,
        group_by_agent: bool = False,
        advantage_per: str = "rollout",
        negative_advantage_weight: float = 1.0,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
        rollout_timeout_s: float | None = None,
    ) -> VERLResult:
        from omegaconf import OmegaConf
        from verl.utils.tracking import Tracking

        if advantage_per not in ("rollout", "row"):
            raise ValueError(f"advantage_per must be 'rollout' or 'row', got {advantage_per!r}")
        if not 0.0 <= negative_advantage_weight <= 1.0:
            raise ValueError(f"negative_advantage_weight must be in [0, 1], got {negative_advantage_weight!r}")
        self.run, self.gateway, self.group_by_agent, self.advantage_per = run, gateway, group_by_agent, advantage_per
        self.negative_advantage_weight = negative_advantage_weight
        self.rollout_timeout_s = rollout_timeout_s
        config = self.config
        tracker = Tracking(
            project_name=config.trainer.project_name,
            experiment_name=config.trainer.experiment_name,
            default_backend=config.trainer.logger,
            config=OmegaConf.to_container(config, resolve=True),
        )
        result = VERLResult()
        self.global_steps = 0
        self._load_checkpoint()
        self._sync_weights()  # the replicas serve the actor's weights
        if self.val_tasks and config.trainer.get("val_before_train", True):
            val_metrics = self._validate_traces()
            tracker.log(data=val_metrics, step=self.global_steps)
            result.validations.append(StepRecord(self.global_steps, val_metrics))
        first_epoch = self.global_steps // max(len(self.train_dataloader), 1)  # past 0 when resumed from a checkpoint
        self.global_steps += 1
        for epoch in range(first_epoch, config.trainer.total_epochs):
            for tasks in self.train_dataloader:
                is_last_step = self.global_steps >= self.total_training_steps
                record = StepRecord(self.global_steps, {})
                metrics = record.metrics
                metrics.update(self._train_step(list(tasks), record))
                if (
                    self.val_tasks
                    and config.trainer.test_freq > 0
                    and (is_last_step or self.global_steps % config.trainer.test_freq == 0)
                ):
                    val_metrics = self._validate_traces()
                    metrics.update(val_metrics)
                    result.validations.append(StepRecord(self.global_steps, val_metrics))
                metrics.update({"training/global_step": self.global_steps, "training/epoch": epoch})
                tracker.log(data=metrics, step=self.global_steps)
                result.steps.append(record)
                if on_step is not None:
                    on_step(self.global_steps, metrics)
                self.global_steps += 1
                if is_last_step:
                    break
            else:
                continue
            break
        result.replica_weight_versions = self._replica_weight_versions()
        if result.steps and all(record.skipped_because for record in result.steps):
            first = result.steps[0]
            raise NothingTrained(
                f"no training step of {len(result.steps)} had a trainable sample, so nothing was trained. "
                f"Step {first.step}: " + "; ".join(first.skipped_because)
            )
        return result

    def _sync_weights(self) -> None:
        """Serve the actor's weights; rollouts queued from now on carry this version (the view's policy version)."""
        self.checkpoint_manager.update_weights(self.global_steps)
        self.run.policy_version = self.global_steps

    def _replica_weight_versions(self) -> list[int]:
        import ray

        versions = []
        for replica in self.llm_server_manager.get_replicas():
            for server in replica.servers:
                with contextlib.suppress(AttributeError):  # only our CPU replica counts its weight syncs
                    versions.append(ray.get(server.weight_version.remote()))
        return versions

    # --- generation: the agents, through the gateway -------------------------------------------------------------
    def _generate(self, tasks: Sequence[Any], *, mode: str, n: int) -> BatchResult:
        self.gateway.set_mode(mode)
        self.gateway.resume()
        try:
            return self.run.collect(self.run.submit(tasks, n=n, mode=mode), timeout=self.rollout_timeout_s)
        finally:
            self.gateway.pause()  # late calls get 503 + Retry-After until the next step's weights are in

    def _validate_traces(self) -> dict[str, float]:
        n = int(self.config.actor_rollout_ref.rollout.val_kwargs.get("n", 1))
        result = self._generate(self.val_tasks, mode="val", n=n)
        _, metrics = samples_from(result)
        return {"val/" + key.removeprefix("rollout/"): value for key, value in metrics.items()}

    # --- one training step ---------------------------------------------------------------------------------------
    def _train_step(self, tasks: list[Any], record: StepRecord) -> dict[str, float]:
        config = self.config
        metrics: dict[str, float] = {}
        timing: dict[str, float] = {}
        with marked_timer("step", timing):
            with marked_timer("gen", timing):
                result = self._generate(tasks, mode="train", n=int(config.actor_rollout_ref.rollout.n))
                self.checkpoint_manager.sleep_replicas()
            record.rollout_ids = list(result.batch.rollout_ids)
            samples, rollout_metrics = samples_from(result, group_by_agent=self.group_by_agent)
            metrics.update(rollout_metrics)
            for sample in samples:
                record.sample_response_ids.extend(sample.triplet.response_ids)
                name = sample.triplet.agent_name or ""
                record.sample_agents[name] = record.sample_agents.get(name, 0) + 1
            batch, stats = self._batch(samples)
            metrics.update(stats.as_metrics("batch/"))
            if batch is not None and stats.dropped_long_prompts:  # a skipped step says it among its reasons
                log.warning("step %d: %s", self.global_steps, self._dropped_prompts(stats))
            if batch is None:  # nothing to learn from: count it, say why, keep the policy, wake the replicas
                metrics["training/skipped_step"] = 1.0
                record.skipped_because = self._why_skipped(result, stats)
                log.warning("step %d trained nothing: %s", self.global_steps, "; ".join(record.skipped_because))
                self._sync_weights()
                return metrics
            metrics["training/skipped_step"] = 0.0
            batch = self._learn(batch, metrics, timing)
        metrics.update(compute_data_metrics(batch=batch, use_critic=self.use_critic))
        metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing))
        n_gpus = self.resource_pool_manager.get_n_gpus()
        metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing, n_gpus=n_gpus))
        return metrics

    def _dropped_prompts(self, stats: BatchStats) -> str:
        limit = int(self.config.data.max_prompt_length)
        return (
            f"{stats.dropped_long_prompts} samples dropped: their prompts are longer than data.max_prompt_length="
            f"{limit} (the longest has {stats.longest_dropped_prompt} tokens); raise data.max_prompt_length"
        )

    def _why_skipped(self, result: BatchResult, stats: BatchStats) -> list[str]:
        reasons = why_no_samples([result], self.run.adapter.agent_match)
        if stats.dropped_long_prompts:
            reasons.append(self._dropped_prompts(stats))
        if stats.empty_responses:
            reasons.append(f"{stats.empty_responses} samples had no sampled response token")
        return reasons or ["no sample survived batching"]

    def _row_unit(self) -> int:
        """Rows per rank of a mini-batch must split into whole micro-batches (unless verl sizes them by tokens)."""
        ref = self.config.actor_rollout_ref
        micro = 1
        if not ref.actor.use_dynamic_bsz:
            sizes = [ref.actor.ppo_micro_batch_size_per_gpu, ref.rollout.log_prob_micro_batch_size_per_gpu]
            if self.use_reference_policy:
                sizes.append(ref.ref.log_prob_micro_batch_size_per_gpu)
            micro = math.lcm(*(int(size or 1) for size in sizes))
        return self._get_dp_size(self.actor_rollout_wg, "actor") * micro

    def _only_policy_gradient(self) -> bool:
        """True when the actor's loss is the clipped policy gradient alone (no entropy bonus, no KL loss, a loss
        linear in the advantages, no rejection sampling): a row with zero advantages then contributes nothing."""
        actor = self.config.actor_rollout_ref.actor
        if actor.entropy_coeff != 0.0 or actor.use_kl_loss:
            return False
        mode = actor.policy_loss.get("loss_mode", "vanilla")
        if mode == "bypass_mode":
            corr = actor.policy_loss.get("rollout_correction") or {}
            return corr.get("loss_type", "ppo_clip") == "ppo_clip" and not corr.get("rollout_rs")
        return mode == "vanilla"

    def _batch(self, samples: list[Sample]) -> tuple[DataProto | None, BatchStats]:
        data = self.config.data
        shape = BatchShape(
            max_prompt_length=int(data.max_prompt_length),
            max_response_length=int(data.max_response_length),
            pad_token_id=int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0),
        )
        ref = self.config.actor_rollout_ref
        target = int(ref.actor.ppo_mini_batch_size) * int(ref.rollout.n)
        unit = self._row_unit()
        try:
            batch, stats = build_batch(samples, shape, row_multiple=lambda rows: mini_batch_plan(rows, target, unit)[1])
        except NoTrainableRows as empty:  # no samples at all, or every one dropped: counted, not trained
            return None, empty.stats
        self._mini_batches = mini_batch_plan(stats.rows, target, unit)[0]
        return batch, stats

    def _learn(self, batch: DataProto, metrics: dict[str, float], timing: dict[str, float]) -> DataProto:
        """verl's step after generation, as in `RayPPOTrainer.fit`; returns the batch with everything computed."""
        config = self.config
        rollout = config.actor_rollout_ref.rollout
        batch.meta_info["temperature"] = rollout.temperature
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
        batch.meta_info["images_seqlens"] = []
        reward_tensor = batch.batch["token_level_scores"]
        rollout_corr = config.algorithm.get("rollout_correction", None)
        bypass = bool(rollout_corr and rollout_corr.get("bypass_mode", False))
        if bypass:
            from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode

            apply_bypass_mode(batch=batch, rollout_corr_config=rollout_corr,
                              policy_loss_config=config.actor_rollout_ref.actor.policy_loss)  # fmt: skip
        else:
            with marked_timer("old_log_prob", timing):
                old_log_prob, _ = self._compute_old_log_prob(batch)
                old_log_prob.batch.pop("entropys")
                batch = batch.union(old_log_prob)
                from verl.utils.debug.metrics import calculate_debug_metrics

                # training/rollout_probs_diff_*: the trainer's log-probs of the trained tokens vs the sampler's.
                metrics.update(calculate_debug_metrics(batch))
        if self.use_reference_policy:
            with marked_timer(str(Role.RefPolicy), timing):
                batch = batch.union(self._compute_ref_log_prob(batch))
        if self.use_critic:
            with marked_timer("values", timing):
                batch = batch.union(self._compute_values(batch))
        with marked_timer("adv", timing):
            batch.batch["token_level_scores"] = reward_tensor
            if config.algorithm.use_kl_in_reward:
                batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=self.kl_ctrl_in_reward,
                                                     kl_penalty=config.algorithm.kl_penalty)  # fmt: skip
                metrics.update(kl_metrics)
            else:
                batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
            if rollout_corr is not None and "rollout_log_probs" in batch.batch and not bypass:
                from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

                batch, corr_metrics = compute_rollout_correction_and_add_to_batch(batch, rollout_corr)
                metrics.update(corr_metrics)
            norm_by_std = config.algorithm.get("norm_adv_by_std_in_grpo", True)
            if config.algorithm.adv_estimator == "grpo" and self.advantage_per == "rollout":
                batch = rollout_level_grpo(batch, norm_adv_by_std=norm_by_std)
            else:
                batch = compute_advantage(
                    batch,
                    adv_estimator=config.algorithm.adv_estimator,
                    gamma=config.algorithm.gamma,
                    lam=config.algorithm.lam,
                    num_repeat=rollout.n,
                    norm_adv_by_std_in_grpo=norm_by_std,
                    config=config.algorithm,
                )
            if self.negative_advantage_weight != 1.0:
                batch = weigh_negative_advantages(batch, self.negative_advantage_weight)
        if self.use_critic:
            with marked_timer("update_critic", timing):
                metrics.update(reduce_metrics(self._update_critic(batch).meta_info["metrics"]))
        if config.trainer.critic_warmup > self.global_steps:
            self._sync_weights()
            return batch
        with marked_timer("update_actor", timing):
            actor_output = self._update_actor(batch)
        if config.trainer.save_freq > 0 and (
            self.global_steps >= self.total_training_steps or self.global_steps % config.trainer.save_freq == 0
        ):
            with marked_timer("save_checkpoint", timing):
                self._save_checkpoint()
        with marked_timer("update_weights", timing):
            self._sync_weights()
        metrics.update(reduce_metrics(actor_output.meta_info["metrics"]))
        return batch

    def _update_actor(self, batch: DataProto) -> DataProto:
        """verl's actor update, with the mini-batch size fitted to this batch's row count (rows per rollout vary)."""
        actor = self.config.actor_rollout_ref.actor
        batch.meta_info["multi_turn"] = True
        batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        mini_batches = max(getattr(self, "_mini_batches", 1), 1)
        mini_batch_rows = len(batch) // mini_batches
        global_rows = mini_batch_rows  # the seq-mean losses' normaliser: every row, trained or not
        if self._only_policy_gradient() and mini_batches == 1:
            subset = rows_with_gradient(batch, self._row_unit(), str(actor.loss_agg_mode))
            if subset is not None:
                batch, scale = subset
                batch.batch["advantages"] = batch.batch["advantages"] * scale
                mini_batch_rows = len(batch)
        rows_updated = len(batch)
        batch_td = left_right_2_no_padding(batch.to_tensordict())
        tu.assign_non_tensor(
            batch_td,
            calculate_entropy=bool(actor.calculate_entropy or actor.entropy_coeff != 0.0),
            distillation_use_topk=False,
            distillation_only=False,
            global_batch_size=global_rows,
            mini_batch_size=mini_batch_rows,
            epochs=actor.ppo_epochs,
            seed=actor.data_loader_seed,
            dataloader_kwargs={"shuffle": actor.shuffle},
            compute_loss=True,
        )
        output = rename_dict(tu.get(self.actor_rollout_wg.update_actor(batch_td), "metrics"), "actor/")
        output["perf/mfu/actor"] = output.pop("actor/mfu")
        output["actor/rows_updated"] = rows_updated  # rows that went through forward and backward
        return DataProto.from_single_dict(data={}, meta_info={"metrics": output})


__all__ = [
    "RunnerGeneration",
    "StepRecord",
    "TraceRayPPOTrainer",
    "VERLResult",
    "mini_batch_plan",
    "rollout_level_grpo",
    "samples_from",
]
