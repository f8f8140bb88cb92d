"""verl as a backend of the training loop: its update after generation, on samples taken from traces.

verl's own `RayPPOTrainer.fit` generates with its agent loop: one row per prompt and rollout. Here the loop runs the
user's agents in runners against the policy gateway; their traces, adapted by `agent_match`, give any number of
rows per rollout (multi-turn, multi-agent), each with the advantage the loop's estimator gave it. `VERLBackend`
turns them into verl's batch and runs verl's step after generation: old log-probs, reference, values, advantages
(verl's `compute_advantage` only when the loop leaves them to it: `algorithm.adv_estimator` other than GRPO),
critic and actor updates; it serves the policy from verl's rollout replicas, syncs their weights (`publish`) and
saves and loads verl's checkpoints. verl's private names are reached through `verl_internals`. Needs `[verl]`.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from verl import DataProto
from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_timing_metrics
from verl.trainer.ppo.ray_trainer import apply_kl_penalty, compute_advantage
from verl.trainer.ppo.utils import Role
from verl.utils import tensordict_utils as tu
from verl.utils.metric import reduce_metrics
from verl.utils.profiler import marked_timer
from verl.utils.py_functional import rename_dict
from verl.workers.utils.padding import left_right_2_no_padding

from lightning_otel.training.loop.advantages import (
    AdvantageEstimator,
    BackendAdvantage,
    GroupAdvantage,
    group_advantages,
)
from lightning_otel.training.loop.backend import Backend, NothingToUpdate, PolicyReplicas
from lightning_otel.training.loop.credit import advantage_estimator
from lightning_otel.training.loop.samples import Sample, samples_from
from lightning_otel.training.verl import verl_internals
from lightning_otel.training.verl.batch import BatchShape, BatchStats, NoTrainableRows, build_batch
from lightning_otel.training.verl.cpu import ROLLOUT_NAME

log = logging.getLogger("lightning_otel.verl")


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
    spider example's README for measurements. (The loop's `GroupAdvantage` does the same for GRPO.)"""
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
    """GRPO advantages computed over rollouts, not rows, on a built batch (the loop's `GroupAdvantage(per="rollout")`
    on its rows): a rollout that gave several rows counts once in its group's mean and std, then every row of it
    gets its advantage. Sets `advantages` and `returns` on the sampled tokens."""
    scores = batch.batch["token_level_rewards"].sum(dim=-1).tolist()
    keys = list(zip(batch.non_tensor_batch["uid"], batch.non_tensor_batch["rollout_id"], strict=True))
    rewards = dict(zip(keys, scores, strict=True))  # rows of one rollout share its reward
    advantages = group_advantages(rewards, {key: key[0] for key in rewards}, normalize_by_std=norm_adv_by_std)
    per_row = torch.tensor([advantages[key] for key in keys], dtype=torch.float32)
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
        raise RuntimeError("with lightning-otel, rollouts are generated by the runners (the training loop)")


def _task_batch(items: list[Any]) -> list[Any]:
    """The dataloader's collate: a step's tasks, as they are (runners get each task as given)."""
    return list(items)


class VERLBackend(Backend):
    """verl's workers and replicas for one run (build inside a Ray session). With `algorithm.adv_estimator=grpo` the
    loop's estimator sets every sample's advantage (GRPO per rollout or per row, `advantage_per`); with verl's other
    estimators verl's `compute_advantage` does, then `negative_advantage_weight` applies."""

    name = "verl"

    def __init__(
        self,
        config: Any,
        train_tasks: list[Any],
        val_tasks: list[Any],
        *,
        advantage_per: str = "rollout",
        negative_advantage_weight: float = 1.0,
    ) -> None:
        verl_internals.require_tested_verl()
        self.config = config
        self.own_advantages = config.algorithm.adv_estimator == "grpo"
        self.advantage_per, self.negative_advantage_weight = advantage_per, negative_advantage_weight
        self.trainer = verl_internals.build_trainer(config, train_tasks, val_tasks, _task_batch)
        self.trainer.init_workers()
        self.total_steps = int(self.trainer.total_training_steps)
        self._mini_batches = 1
        # The CPU replicas are Ray actors of their own, serving while the actor trains; vLLM's sleep beside it.
        self.serves_while_updating = str(config.actor_rollout_ref.rollout.name) == ROLLOUT_NAME
        self.why_not_async = "verl's vLLM replicas sleep while the colocated actor trains"

    # --- serving -------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def serving(self) -> Iterator[PolicyReplicas]:
        replicas = [f"http://{address}/v1" for address in self.trainer.llm_server_manager.get_addresses()]
        yield PolicyReplicas(replicas, _served_model(replicas[0]))

    def pause_serving(self) -> None:
        self.trainer.checkpoint_manager.sleep_replicas()

    def estimator(self, advantage: str | AdvantageEstimator) -> AdvantageEstimator:
        """GRPO from the loop (per rollout by default, verl's `norm_adv_by_std_in_grpo`); verl's other estimators
        (GAE, RLOO, REINFORCE++, ...) are verl's own."""
        config = self.config
        if not self.own_advantages:
            if advantage != "grpo":
                raise ValueError(
                    f"advantage={advantage!r} replaces verl's estimator: set algorithm.adv_estimator=grpo (it is "
                    f"{config.algorithm.adv_estimator!r})"
                )
            return BackendAdvantage()
        grpo = GroupAdvantage(
            per=self.advantage_per,  # type: ignore[arg-type]
            normalize_by_std=bool(config.algorithm.get("norm_adv_by_std_in_grpo", True)),
            negative_weight=self.negative_advantage_weight,
        )
        return advantage_estimator(advantage, grpo)

    def publish(self, version: int) -> None:
        """The actor's weights to the replicas (which wake up), served as `version` (verl's `global_steps`)."""
        self.trainer.checkpoint_manager.update_weights(version)

    def finish(self) -> dict[str, float]:
        """The version the CPU replicas serve at the end (each names it on its answers; vLLM's name none)."""
        versions = self.replica_weight_versions()
        if not versions:
            return {}
        return {"verl/replica_version_min": float(min(versions)), "verl/replica_version_max": float(max(versions))}

    def save(self, step: int) -> str:
        return verl_internals.save_checkpoint(self.trainer, step)

    def load(self) -> int:
        return verl_internals.load_checkpoint(self.trainer)

    def replica_weight_versions(self) -> list[int]:
        import ray

        versions = []
        for replica in self.trainer.llm_server_manager.get_replicas():
            for server in replica.servers:
                with contextlib.suppress(AttributeError):  # only our CPU replica counts its weight syncs
                    versions.append(ray.get(server.weight_version.remote()))
        return versions

    # --- one update ----------------------------------------------------------------------------------------------
    def idle_metrics(self) -> dict[str, float]:
        return BatchStats().as_metrics("batch/")

    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        trainer = self.trainer
        trainer.global_steps = step
        metrics: dict[str, float] = {}
        timing: dict[str, float] = {}
        batch, stats = self._batch(samples)
        metrics.update(stats.as_metrics("batch/"))
        if batch is None:
            raise NothingToUpdate(self._why_no_rows(stats), metrics)
        if stats.dropped_long_prompts:  # a skipped step says it among its reasons
            log.warning("step %d: %s", step, self._dropped_prompts(stats))
        batch = self._learn(batch, metrics, timing)
        metrics.update(compute_data_metrics(batch=batch, use_critic=trainer.use_critic))
        metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing))
        return metrics

    def _dropped_prompts(self, stats: BatchStats) -> str:
        limit = int(self.config.data.max_prompt_length)
        return (
            f"{stats.dropped_long_prompts} samples dropped: their prompts are longer than data.max_prompt_length="
            f"{limit} (the longest has {stats.longest_dropped_prompt} tokens); raise data.max_prompt_length"
        )

    def _why_no_rows(self, stats: BatchStats) -> list[str]:
        reasons = []
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
            if self.trainer.use_reference_policy:
                sizes.append(ref.ref.log_prob_micro_batch_size_per_gpu)
            micro = math.lcm(*(int(size or 1) for size in sizes))
        return verl_internals.data_parallel_size(self.trainer) * micro

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

    def _batch(self, samples: Sequence[Sample]) -> tuple[DataProto | None, BatchStats]:
        data = self.config.data
        tokenizer = self.trainer.tokenizer
        shape = BatchShape(
            max_prompt_length=int(data.max_prompt_length),
            max_response_length=int(data.max_response_length),
            pad_token_id=int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0),
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
        config, trainer = self.config, self.trainer
        rollout = config.actor_rollout_ref.rollout
        batch.meta_info["temperature"] = rollout.temperature
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
        batch.meta_info["images_seqlens"] = []
        reward_tensor = batch.batch["token_level_scores"]
        estimated = {key: batch.batch.pop(key) for key in ("advantages", "returns") if key in batch.batch}
        rollout_corr = config.algorithm.get("rollout_correction", None)
        bypass = bool(rollout_corr and rollout_corr.get("bypass_mode", False))
        if bypass:
            from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode

            apply_bypass_mode(batch=batch, rollout_corr_config=rollout_corr,
                              policy_loss_config=config.actor_rollout_ref.actor.policy_loss)  # fmt: skip
        else:
            with marked_timer("old_log_prob", timing):
                batch = batch.union(verl_internals.old_log_prob(trainer, batch))
                from verl.utils.debug.metrics import calculate_debug_metrics

                # training/rollout_probs_diff_*: the trainer's log-probs of the trained tokens vs the sampler's.
                metrics.update(calculate_debug_metrics(batch))
        if trainer.use_reference_policy:
            with marked_timer(str(Role.RefPolicy), timing):
                batch = batch.union(verl_internals.ref_log_prob(trainer, batch))
        if trainer.use_critic:
            with marked_timer("values", timing):
                batch = batch.union(verl_internals.values(trainer, batch))
        with marked_timer("adv", timing):
            batch.batch["token_level_scores"] = reward_tensor
            if config.algorithm.use_kl_in_reward:
                batch, kl_metrics = apply_kl_penalty(batch, kl_ctrl=trainer.kl_ctrl_in_reward,
                                                     kl_penalty=config.algorithm.kl_penalty)  # fmt: skip
                metrics.update(kl_metrics)
            else:
                batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
            if rollout_corr is not None and "rollout_log_probs" in batch.batch and not bypass:
                from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

                batch, corr_metrics = compute_rollout_correction_and_add_to_batch(batch, rollout_corr)
                metrics.update(corr_metrics)
            if estimated and self.own_advantages:
                batch.batch["advantages"], batch.batch["returns"] = estimated["advantages"], estimated["returns"]
            else:
                batch = compute_advantage(
                    batch,
                    adv_estimator=config.algorithm.adv_estimator,
                    gamma=config.algorithm.gamma,
                    lam=config.algorithm.lam,
                    num_repeat=rollout.n,
                    norm_adv_by_std_in_grpo=config.algorithm.get("norm_adv_by_std_in_grpo", True),
                    config=config.algorithm,
                )
                if self.negative_advantage_weight != 1.0:
                    batch = weigh_negative_advantages(batch, self.negative_advantage_weight)
                moving = (batch.batch["advantages"] != 0) & batch.batch["response_mask"].bool()
                if not self.trainer.use_critic and not bool(moving.any()):
                    raise NothingToUpdate(
                        [f"verl's {config.algorithm.adv_estimator} estimator gave every sample a zero advantage "
                         "(every group's rewards were equal?): the policy cannot learn from this step"], metrics
                    )  # fmt: skip
        if trainer.use_critic:
            with marked_timer("update_critic", timing):
                metrics.update(reduce_metrics(verl_internals.update_critic(trainer, batch).meta_info["metrics"]))
        if config.trainer.critic_warmup > trainer.global_steps:
            return batch
        with marked_timer("update_actor", timing):
            actor_output = self._update_actor(batch)
        metrics.update(reduce_metrics(actor_output.meta_info["metrics"]))
        return batch

    def _update_actor(self, batch: DataProto) -> DataProto:
        """verl's actor update, with the mini-batch size fitted to this batch's row count (rows per rollout vary)."""
        actor = self.config.actor_rollout_ref.actor
        batch.meta_info["multi_turn"] = True
        batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        mini_batches = max(self._mini_batches, 1)
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
        output = rename_dict(tu.get(self.trainer.actor_rollout_wg.update_actor(batch_td), "metrics"), "actor/")
        output["perf/mfu/actor"] = output.pop("actor/mfu")
        output["actor/rows_updated"] = rows_updated  # rows that went through forward and backward
        return DataProto.from_single_dict(data={}, meta_info={"metrics": output})


def _served_model(replica: str) -> str:
    """The model name a replica serves (vLLM: the model's local path), from its /v1/models."""
    import httpx

    return str(httpx.get(f"{replica}/models", timeout=60).json()["data"][0]["id"])


__all__ = [
    "RunnerGeneration",
    "VERLBackend",
    "mini_batch_plan",
    "rollout_level_grpo",
    "rows_with_gradient",
    "samples_from",
    "weigh_negative_advantages",
]
