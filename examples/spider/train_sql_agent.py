"""Train the SQL agent with VERL: the tutorial's command line, plus a CPU profile that runs offline.

    python train_sql_agent.py qwen                    # Qwen2.5-Coder-1.5B-Instruct, GRPO on vLLM (one 40+ GB GPU)
    python train_sql_agent.py llama                   # Llama-3.2-1B-Instruct (export HF_TOKEN first)
    python train_sql_agent.py cpu                     # offline on CPU: tiny model, teacher warm start, then GRPO
    python train_sql_agent.py qwen --dev              # dry run: 10 tasks against $OPENAI_API_BASE, every span printed
    python train_sql_agent.py cpu --ci-fast           # 2 GRPO steps of a tiny random policy (CI's smoke test;
                                                      # partial credit for near-miss queries, see sql_agent.py)
    python train_sql_agent.py qwen --active-agent write --collector http://127.0.0.1:16686
    python train_sql_smollm2.py --seed 0              # SmolLM2-135M-Instruct on CPU: warm start, then GRPO (Tinker)

`--active-agent` is the `agent_match` regex (default "write": write_query and rewrite_query are trained, check_query
is not). Data: `data/` here or `$VERL_SPIDER_DATA_DIR`, built offline when missing (see prepare_dataset.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prepare_dataset import data_ready, default_data_dir, prepare
from sql_agent import LitSQLAgent

import lightning_otel as agl

os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # the warm start's dataset preparation, one line
HERE = Path(__file__).resolve().parent

GPU_MODELS = {
    "qwen": ("Qwen/Qwen2.5-Coder-1.5B-Instruct", "hermes"),
    "llama": ("meta-llama/Llama-3.2-1B-Instruct", "llama3_json"),
}


def verl_config(model_path: str, tool_format: str) -> dict[str, Any]:
    """The tutorial's configuration (one GPU with 40+ GB)."""
    return {
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
        "data": {"train_batch_size": 32, "max_prompt_length": 4096, "max_response_length": 2048},
        "actor_rollout_ref": {
            "rollout": {
                "name": "vllm",
                "n": 4,
                "multi_turn": {"format": tool_format},
                "log_prob_micro_batch_size_per_gpu": 4,
                "tensor_model_parallel_size": 1,
                "gpu_memory_utilization": 0.6,
            },
            "actor": {
                "ppo_mini_batch_size": 32,
                "ppo_micro_batch_size_per_gpu": 4,
                "optim": {"lr": 1e-6},
                "use_kl_loss": False,
                "entropy_coeff": 0,
            },
            "ref": {"log_prob_micro_batch_size_per_gpu": 8},
            "model": {"path": model_path, "use_remove_padding": True, "enable_gradient_checkpointing": True},
        },
        "trainer": {
            "n_gpus_per_node": 1,
            "val_before_train": True,
            "test_freq": 32,
            "save_freq": 64,
            "total_epochs": 2,
            "logger": ["console"],
            "project_name": "AgentLightning",
            "experiment_name": "spider",
        },
    }


def cpu_config(
    model_path: Path,
    work: Path,
    *,
    steps: int,
    test_freq: int,
    lr: float,
    seed: int,
    tasks: int,
    rollouts: int,
    temperature: float,
) -> dict[str, Any]:
    """GRPO on CPU for the tiny policy: small batches, a high learning rate, validation every `test_freq` steps."""
    return {
        # The replica's sampled log-probs equal the float32 actor's (to 5 decimals): use them as the old policy's
        # instead of recomputing them every step (verl's bypass mode, plain PPO clip).
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False, "rollout_correction": {"bypass_mode": True}},
        "data": {"train_batch_size": tasks, "max_prompt_length": 1024, "max_response_length": 48, "seed": seed},
        "actor_rollout_ref": {
            "model": {"path": str(model_path)},
            "rollout": {
                "n": rollouts,
                "temperature": temperature,
                "log_prob_micro_batch_size_per_gpu": 16,
                "val_kwargs": {"temperature": 0.0, "do_sample": False, "n": 1},
            },
            "actor": {
                "ppo_mini_batch_size": tasks,
                "ppo_micro_batch_size_per_gpu": 16,
                "optim": {"lr": lr},
                "use_kl_loss": False,
                "entropy_coeff": 0,
            },
        },
        "trainer": {
            "total_epochs": 1000,  # bounded by total_training_steps
            "total_training_steps": steps,
            "val_before_train": True,
            "test_freq": test_freq,
            "save_freq": -1,
            "logger": ["console"],  # the training loop's line (a progress bar on a terminal) a step
            "project_name": "lightning-otel-spider",
            "experiment_name": "cpu",
            "default_local_dir": str(work / "checkpoints"),
        },
    }


def load_split(data_dir: Path, name: str) -> list[dict[str, Any]]:
    return agl.load_tasks(data_dir / name)


@contextlib.contextmanager
def collector_address(url: str | None, work: Path) -> Iterator[str]:
    """The collector everything reports to: the one given, or an embedded one with its SQLite store in `work`."""
    if url:
        yield url
        return
    from lightning_otel.collector import EmbeddedCollector

    store = work / "collector.sqlite3"
    with EmbeddedCollector.on_sqlite_file(store, fresh=True) as addresses:
        print(f"embedded agl-otel-collector: store {store}, query API {addresses.query}")
        yield addresses.query


def binomial_se(accuracy: float, n: int) -> float:
    return math.sqrt(max(accuracy * (1 - accuracy), 1e-12) / max(n, 1))


# --- --dev ------------------------------------------------------------------------------------------------------
def dev(args: argparse.Namespace, agent: LitSQLAgent, data_dir: Path) -> int:
    """Trainer.dev on 10 validation tasks: against $OPENAI_API_BASE, or the scripted teacher when it is unset."""
    from warm_start import teacher_endpoint

    tasks = load_split(data_dir, "test_dev_500.parquet")[:10]
    url = os.environ.get("OPENAI_API_BASE")
    model = os.environ.get("OPENAI_MODEL", "gpt-4.1-nano") if url else "scripted-teacher"
    if url is None:
        print("OPENAI_API_BASE is not set: the dry run talks to the built-in scripted teacher (test server)")
    with teacher_endpoint(url, tasks) as base_url:
        key = os.environ.get("OPENAI_API_KEY", "dummy")
        llm = agl.LLM(base_url, model, sampling_parameters={"temperature": 0.7}, api_key=key)
        trainer = agl.Trainer(
            n_workers=1,
            initial_resources={"main_llm": llm},
            adapter={"agent_match": args.active_agent or None},
            collector=args.collector,
        )
        result = trainer.dev(agent, dev_dataset=tasks)
    rewards = [reward for batch in result.train for reward in batch.rewards().values() if reward is not None]
    print(f"dry run: {len(rewards)} rollouts, execution accuracy {statistics.fmean(rewards) if rewards else 0:.2f}")
    return 0


# --- qwen / llama -----------------------------------------------------------------------------------------------
def train_gpu(args: argparse.Namespace, agent: LitSQLAgent, data_dir: Path) -> int:
    model, tool_format = GPU_MODELS[args.profile]
    trainer = agl.Trainer(
        n_runners=args.n_runners,
        algorithm=agl.VERL(verl_config(model, tool_format), agl.TrainingOptions(advantage=args.advantage)),
        adapter={"agent_match": args.active_agent or None},
        initial_resources={"main_llm": agl.LLM("http://replaced-by-the-gateway/v1", model)},
        collector=args.collector,
    )
    train_data = load_split(data_dir, "train_spider.parquet")
    val_data = load_split(data_dir, "test_dev_500.parquet")
    trainer.fit(agent, train_dataset=train_data, val_dataset=val_data)
    return 0


# --- cpu ------------------------------------------------------------------------------------------------------
def write_curve(validations: list[tuple[int, float]], n: int, path: Path) -> Path | str:
    try:
        import matplotlib
    except ImportError:
        return "not drawn (pip install matplotlib)"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [step for step, _ in validations]
    accuracy = [value for _, value in validations]
    errors = [binomial_se(value, n) for value in accuracy]
    figure, axis = plt.subplots(figsize=(7, 4))
    axis.errorbar(steps, accuracy, yerr=errors, fmt="o-", capsize=3, label=f"validation ({n} questions, ±1 SE)")
    axis.set(xlabel="GRPO step (0: after the warm start)", ylabel="execution accuracy", ylim=(0, 1))
    axis.set_title("SQL agent on CPU: teacher warm start, then GRPO (agent_match=write)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def train_cpu(args: argparse.Namespace, agent: LitSQLAgent, data_dir: Path) -> int:
    from warm_start import build_policy, teacher_warm_start

    started = time.monotonic()
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    train_data = load_split(data_dir, "train_spider.parquet")
    val_data = load_split(data_dir, "test_dev_500.parquet")[: args.val_size]
    initial = build_policy(work / "model-init", train_data, data_dir, hidden_size=128, layers=4, seed=args.seed)
    print(f"policy: a tiny random Llama-shaped model (hidden 128, 4 layers), a BPE trained on the prompts: {initial}")
    if not args.verbose:
        print(f"other libraries' output (Ray, verl, torch, the runners): {work / 'train.log'}  (-v shows it here)")
    with collector_address(args.collector, work) as collector:
        if args.ci_fast:
            policy, steps, test_freq = initial, 2, -1
            train_data, val_data = train_data[:4], []
        elif args.policy:
            print(f"warm start skipped: GRPO starts from {args.policy}")
            policy, steps, test_freq = Path(args.policy), args.steps, args.test_freq
        else:
            print(f"warm start: the agent answers {len(train_data)} training questions with the teacher; "
                  "SFT on the calls of the rollouts that scored 1", flush=True)  # fmt: skip
            with agl.quiet(work / "train.log", verbose=args.verbose):
                sft = teacher_warm_start(
                    agent,
                    train_data,
                    initial,
                    work / "model-sft",
                    teacher_url=args.teacher_url,
                    teacher_model=args.teacher_model,
                    collector=collector,
                    n_runners=args.n_runners,
                    fine_tune={
                        "epochs": args.sft_epochs,
                        "learning_rate": 3e-3,
                        "batch_size": 16,
                        "seed": args.seed,
                        "trl_args": {"lr_scheduler_type": "cosine", "warmup_steps": 0.05},  # a share of the steps
                    },
                )
            done = sft.final
            print(f"  teacher accuracy {done['sft/teacher_reward_mean']:.3f}; {done['sft/examples']:.0f} examples; "
                  f"loss {done['sft/first_loss']:.2f} -> {done['sft/last_loss']:.2f} in "
                  f"{done['sft/train_seconds']:.0f}s", flush=True)  # fmt: skip
            policy, steps, test_freq = work / "model-sft", args.steps, args.test_freq
        config = cpu_config(
            policy,
            work,
            steps=steps,
            test_freq=test_freq,
            lr=args.lr,
            seed=args.seed,
            tasks=args.tasks,
            rollouts=args.rollouts,
            temperature=args.temperature,
        )
        if args.ci_fast:
            config["data"].update(train_batch_size=2)
            config["actor_rollout_ref"]["rollout"]["n"] = 2
            config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = 2
            config["trainer"]["val_before_train"] = False
            # CI measures what bypass mode assumes: the actor's log-probs of the sampled tokens equal the sampler's
            config["algorithm"]["rollout_correction"]["bypass_mode"] = False
        print(f"GRPO with VERL on CPU: {steps} steps of {config['data']['train_batch_size']} tasks x "
              f"{config['actor_rollout_ref']['rollout']['n']} rollouts, agent_match={args.active_agent!r}, "
              f"temperature {args.temperature:g}, lr {args.lr:g}, "
              f"negative advantages x{args.negative_advantage_weight:g}, advantage {args.advantage}; "
              f"validation on {len(val_data)} questions", flush=True)  # fmt: skip
        trainer = agl.Trainer(
            n_runners=args.n_runners,
            # a step's rollouts all in flight at once: the CPU replica samples the requests waiting together
            runner_options=agl.RunnerOptions(
                max_concurrency=max(16, math.ceil(args.tasks * args.rollouts / max(1, args.n_runners)))
            ),
            algorithm=agl.VERL(
                config,
                agl.TrainingOptions(advantage=args.advantage),
                device="cpu",
                negative_advantage_weight=args.negative_advantage_weight,
            ),
            adapter={"agent_match": args.active_agent or None},
            initial_resources={"main_llm": agl.LLM("http://replaced-by-the-gateway/v1", "policy")},
            collector=collector,
            progress=False,
        )
        with agl.quiet(work / "train.log", verbose=args.verbose):  # Ray, verl, torch: into the log
            result = trainer.fit(agent, train_data, val_data or None)
    steps_done = [{"step": r.step, "metrics": r.metrics, "sample_agents": r.sample_agents} for r in result.steps]
    summary: dict[str, Any] = {"steps": steps_done, "seconds": 0.0}
    if val_data:
        validations = [(record.step, record.metrics["val/reward_mean"]) for record in result.validations]
        (_, before), (last_step, after) = validations[0], validations[-1]
        n = len(val_data)
        se = binomial_se(before, n)
        curve = write_curve(validations, n, work / "accuracy_curve.png")
        print(f"\nvalidation execution accuracy ({n} questions, greedy):")
        print(f"  after the warm start (step 0): {before:.3f} ± {se:.3f} (binomial SE)")
        print(f"  after GRPO (step {last_step}):      {after:.3f} ± {binomial_se(after, n):.3f}")
        # Both numbers are noisy: the difference's own SE is about sqrt(2) times one measurement's.
        z = (after - before) / math.sqrt(se**2 + binomial_se(after, n) ** 2)
        print(f"  change: {after - before:+.3f} = {(after - before) / se:+.1f} SE of one measurement "
              f"(two-sample z {z:+.2f}); curve: {curve}")  # fmt: skip
        summary.update(validations=validations, val_size=n, before=before, after=after, se=se, z=z)
    summary["seconds"] = time.monotonic() - started
    (work / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"done in {summary['seconds']:.0f}s; metrics in {work / 'summary.json'}")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", choices=["qwen", "llama", "cpu"])
    parser.add_argument("--active-agent", default="write", help="agent_match: regex on the agents trained ('': all)")
    parser.add_argument("--dev", action="store_true", help="dry run with Trainer.dev (no training)")
    parser.add_argument("--ci-fast", action="store_true", help="cpu: 2 GRPO steps of a tiny random policy")
    parser.add_argument("--collector", help="a running agl-otel-collector's query URL (default: an embedded one)")
    parser.add_argument("--n-runners", type=int, default=2)
    parser.add_argument("--max-turns", type=int, help="write/rewrite turns (3; cpu: 1, see the README)")
    parser.add_argument(
        "--truncate-length", type=int, help="characters of execution result the checker reads (2048; cpu: 256)"
    )
    cpu = parser.add_argument_group("cpu profile")
    cpu.add_argument("--workdir", default=str(HERE / "runs" / "cpu"))
    parser.add_argument("-v", "--verbose", action="store_true", help="other libraries' output here (default: the "
                        "work directory's train.log)")  # fmt: skip
    cpu.add_argument("--steps", type=int, default=120, help="GRPO steps")
    cpu.add_argument("--test-freq", type=int, default=30, help="validate every N steps")
    cpu.add_argument("--val-size", type=int, default=500, help="validation questions (from test_dev_500)")
    cpu.add_argument("--lr", type=float, default=3e-4)
    cpu.add_argument("--tasks", type=int, default=8, help="questions per GRPO step")
    cpu.add_argument("--rollouts", type=int, default=8, help="rollouts per question (GRPO's group)")
    cpu.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the GRPO rollouts")
    cpu.add_argument(
        "--negative-advantage-weight",
        type=float,
        default=0.0,
        help="scale of GRPO's negative advantages (1: plain GRPO; 0: reinforce only better-than-group rollouts)",
    )
    parser.add_argument("--advantage", choices=["grpo", "anchor"], default="grpo",
                        help="grpo: each call trained on its rollout's reward; anchor: per-call credit (docs: Per-call "
                        "credit)")  # fmt: skip
    cpu.add_argument("--sft-epochs", type=float, default=9.0)
    cpu.add_argument("--seed", type=int, default=0)
    cpu.add_argument("--policy", help="skip the warm start: GRPO from this model (e.g. runs/cpu/model-sft)")
    cpu.add_argument("--teacher-url", help="an OpenAI-compatible teacher (default: the scripted test server)")
    cpu.add_argument("--teacher-model", default="scripted-teacher")
    args = parser.parse_args()
    data_dir = default_data_dir()
    if not data_ready(data_dir):
        prepare(data_dir)
    truncate_length = args.truncate_length or (256 if args.profile == "cpu" else 2048)  # short prompts on a CPU
    max_turns = args.max_turns or (1 if args.profile == "cpu" else 3)  # cpu: the warm start teaches write_query only
    # cpu: the one turn's check could not lead to a rewrite, so it is not asked for (half the sampling per rollout)
    # --ci-fast trains a random policy, which never writes a correct query: partial credit gives its groups a signal
    agent = LitSQLAgent(max_turns, truncate_length, data_dir, check_last_turn=args.profile != "cpu",
                        partial=bool(getattr(args, "ci_fast", False)))  # fmt: skip
    if args.dev:
        sys.exit(dev(args, agent, data_dir))
    sys.exit(train_cpu(args, agent, data_dir) if args.profile == "cpu" else train_gpu(args, agent, data_dir))


if __name__ == "__main__":
    main()
