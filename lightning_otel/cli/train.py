"""`lightning-otel train`: train an agent with VERL from the command line (or `--dev`: a dry run, no training).

    lightning-otel train --agent my_agents:sql_rollout --train train.jsonl --val val.jsonl \\
        --model Qwen/Qwen2.5-0.5B-Instruct --agent-match write --runners 4 \\
        data.train_batch_size=32 actor_rollout_ref.rollout.n=8 trainer.total_epochs=2
    lightning-otel train --ci-fast --agent my_agents:sql_rollout --train train.jsonl   # 2 tiny GRPO steps on CPU

Positional `key=value` arguments are verl overrides (verl's own names, applied last); `--config verl.yaml` merges a
whole verl config first. `--tiny-model` (implied by `--ci-fast` without `--model`) builds a tiny random model offline.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from lightning_otel.collector.client import collector_url_argument
from lightning_otel.collector.tcp_listener import port_number

# `--ci-fast`: the smallest run that is still real: 2 GRPO steps of a tiny model, every stage of the pipeline.
CI_FAST_OVERRIDES = [
    "trainer.total_training_steps=2",
    "data.train_batch_size=2",
    "actor_rollout_ref.rollout.n=2",
    "data.max_prompt_length=2000",  # real agents send 500-2000-token prompts (a harness more: override it)
    "data.max_response_length=16",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
]


def regex(text: str) -> str:
    """argparse `type=`: a regular expression that compiles (`--agent-match`)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {exc}") from None
    return text


def process_rewards(text: str) -> dict[str, float]:
    """`tool_error=-0.5,truncated=-0.2` -> {"tool_error": -0.5, "truncated": -0.2} (names checked by the adapter)."""
    from lightning_otel.adapters.process_rewards import ProcessRewards

    pairs: dict[str, float] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, sep, value = part.partition("=")
        try:
            pairs[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise argparse.ArgumentTypeError(f"{part!r} is not NAME=NUMBER (e.g. tool_error=-0.5)")
    try:
        ProcessRewards.from_config(pairs)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return pairs


def add_arguments(train: argparse.ArgumentParser) -> None:
    train.add_argument("--agent", required=True, help="the agent as package.module:name (LitAgent or @rollout)")
    train.add_argument("--train", required=True, help="tasks: .jsonl (one JSON object per line), a JSON list, .parquet")
    train.add_argument("--val", help="validation tasks, same format")
    train.add_argument("--agent-match", type=regex, default=None,
                       help="regex on gen_ai.agent.name selecting the trained calls")  # fmt: skip
    train.add_argument("--runners", type=int, default=2, help="runners (default 2)")
    train.add_argument("--runners-on", choices=["local", "ray"], default="local",
                       help="local: runner processes on this machine (default); ray: runner actors on a Ray cluster "
                            "(verl's, or the one at --ray-address)")  # fmt: skip
    train.add_argument("--ray-address", default=None,
                       help="--runners-on ray: the cluster verl and the runners join (auto, host:6379)")  # fmt: skip
    train.add_argument("--runner-cpus", type=float, default=1.0, help="--runners-on ray: CPUs each actor reserves")
    train.add_argument("--gateway-host", default="127.0.0.1",
                       help="where the policy gateway listens; 0.0.0.0: runners on other machines reach it by this "
                            "machine's name")  # fmt: skip
    train.add_argument("--advantage", choices=["grpo", "anchor"], default="grpo",
                       help="grpo: every call of a rollout gets its final reward's advantage (default); anchor: "
                            "per-call credit (returns and anchor states from the traces)")  # fmt: skip
    train.add_argument("--max-staleness", type=int, default=0, metavar="K",
                       help="0: synchronous steps (default); K >= 1: asynchronous training, the runners never wait "
                            "for the update and samples are at most K policy versions old (CPU replicas)")  # fmt: skip
    train.add_argument(
        "--process-rewards",
        type=process_rewards,
        default=None,
        metavar="NAME=VALUE,...",
        help="penalties read from the traces, e.g. tool_error=-0.5,truncated=-0.2 (also call_error)",
    )
    train.add_argument("--collector", type=collector_url_argument,
                       help="a running agl-otel-collector's query URL (default: an embedded one)")  # fmt: skip
    train.add_argument("--model", help="the policy: smollm2 (SmolLM2-135M-Instruct, built once offline), an HF model "
                       "directory or a hub name verl can load")  # fmt: skip
    train.add_argument("--tiny-model", action="store_true", help="build a tiny random model offline as the policy")
    train.add_argument("--config", help="a verl config file (YAML) merged over the defaults")
    train.add_argument("--ci-fast", action="store_true", help="2 GRPO steps of a tiny model: a smoke test on CPU")
    train.add_argument("--dev", action="store_true", help="no training: a few tasks through Trainer.dev, all printed")
    train.add_argument("--n-tasks", type=int, default=None, help="--dev: run only the first N tasks (default: all)")
    train.add_argument("--base-url", help="--dev: the policy's OpenAI-compatible endpoint (main_llm)")
    train.add_argument("--test-server", action="store_true", help="--dev: serve main_llm from the test server")
    gateway_help = "--dev: a policy gateway in front of main_llm, as in training (agents not instrumented)"
    train.add_argument("--gateway", action="store_true", help=gateway_help)
    train.add_argument("--collector-port", type=port_number, default=0,
                       help="the embedded collector's API port (default: a free one)")  # fmt: skip
    train.add_argument("--otlp-port", type=port_number, default=0,
                       help="the embedded collector's OTLP/HTTP port: where agent services send spans")  # fmt: skip
    train.add_argument("--collector-host", default="127.0.0.1", help="0.0.0.0: reachable from other machines")
    train.add_argument("--policy-notify-file", help="write the policy's address here (default $LLM_SERVER_NOTIFY_FILE)")
    train.add_argument("--span-wait-s", type=float, default=30.0,
                       help="bound on waiting for spans other processes export late (default 30)")  # fmt: skip
    train.add_argument("--log-file", default="lightning-otel-train.log",
                       help="where other libraries' output goes (default ./lightning-otel-train.log)")  # fmt: skip
    train.add_argument("-v", "--verbose", action="store_true", help="other libraries' output here, not in --log-file")
    train.add_argument("overrides", nargs="*", metavar="key=value", help="verl config overrides")


def base_config(model_path: str, *, agent_name: str, has_val: bool) -> dict[str, Any]:
    """What `train` starts from (verl's names): GRPO, 4 rollouts per task, no KL, validation every 5 steps."""
    return {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": 8, "max_prompt_length": 1024, "max_response_length": 256},
        "actor_rollout_ref": {
            "model": {"path": model_path},
            "rollout": {"n": 4, "log_prob_micro_batch_size_per_gpu": 8},
            "actor": {
                "ppo_mini_batch_size": 8,
                "ppo_micro_batch_size_per_gpu": 8,
                "use_kl_loss": False,
                "optim": {"lr": 1e-6},
            },
            "ref": {"log_prob_micro_batch_size_per_gpu": 8},
        },
        "trainer": {
            "total_epochs": 1,
            "project_name": "lightning-otel",
            "experiment_name": agent_name,
            "val_before_train": has_val,
            "test_freq": 5 if has_val else -1,
            "save_freq": -1,
        },
    }


MODEL_PATH_KEY = "actor_rollout_ref.model.path"


def config_model_path(user_config: dict[str, Any], overrides: list[str]) -> str | None:
    """The model path the user's config or overrides name (the last override wins, as verl applies them)."""
    named = [item.split("=", 1)[1] for item in overrides if item.split("=", 1)[0].lstrip("+") == MODEL_PATH_KEY]
    if named:
        return named[-1]
    return ((user_config.get("actor_rollout_ref") or {}).get("model") or {}).get("path")


def policy_source(args: argparse.Namespace, config_model: str | None) -> str | None:
    """The policy's path: --model or the config's model.path; None: a tiny offline model. Naming it twice (or not at
    all, without --tiny-model / --ci-fast) is an error."""
    sources = {"--model": args.model, "--tiny-model": args.tiny_model, f"{MODEL_PATH_KEY} in the config": config_model}
    named = [name for name, value in sources.items() if value]
    if len(named) > 1:
        raise ValueError(f"the policy is named twice ({' and '.join(named)}): keep one")
    if not named and not args.ci_fast:
        raise ValueError("give --model (an HF model verl can load) or --tiny-model")
    return args.model or config_model


@contextlib.contextmanager
def policy_model(source: str | None) -> Iterator[str]:
    """The policy's folder: a model by name (`smollm2`, built once), the source as given, or a tiny offline model."""
    from lightning_otel.models.named import is_named, model_folder

    if source and is_named(source):
        yield str(model_folder(source))
        return
    if source:
        yield source
        return
    from lightning_otel.testing.tiny_model import save_tiny_model

    with tempfile.TemporaryDirectory(prefix="agl-tiny-model-") as directory:
        yield str(save_tiny_model(directory))


def run_train(args: argparse.Namespace) -> int:
    import lightning_otel
    from lightning_otel.agent_api.agent_loading import load_agent
    from lightning_otel.runtime.task_files import load_tasks

    sys.path.insert(0, os.getcwd())  # `--agent my_agents:agent` from the current directory, like python -m
    try:
        collector_options(args)  # the flags' combinations, before anything is loaded
        tasks = load_tasks(args.train)  # the files first: cheaper than importing the agent
        val_tasks = load_tasks(args.val) if args.val else None
        agent = load_agent(args.agent)
    except (ImportError, AttributeError, OSError, ValueError, TypeError) as exc:
        print(f"lightning-otel train: {exc}", file=sys.stderr)
        return 2
    if args.dev:
        return _dev(args, agent, tasks)
    bad = [item for item in args.overrides if "=" not in item]
    if bad:
        print(f"lightning-otel train: overrides must be key=value, got {bad}", file=sys.stderr)
        return 2
    try:
        from omegaconf import OmegaConf
    except ImportError:
        OmegaConf = None  # training needs the [verl] extra: said after the policy arguments are checked
    user_config: dict[str, Any] = {}
    if args.config and OmegaConf is not None:
        user_config = OmegaConf.to_container(OmegaConf.load(args.config))  # type: ignore[assignment]
    try:
        source = policy_source(args, config_model_path(user_config, list(args.overrides)))
    except ValueError as exc:
        print(f"lightning-otel train: {exc}", file=sys.stderr)
        return 2
    if OmegaConf is None:
        print("lightning-otel train: training needs the [verl] extra", file=sys.stderr)
        return 2
    overrides = (CI_FAST_OVERRIDES if args.ci_fast else []) + list(args.overrides)
    agent_name = args.agent.rsplit(":", 1)[-1]
    if not args.verbose:
        print(f"lightning-otel train: other libraries' output (Ray, verl, torch, the runners) goes to {args.log_file} "
              "(-v shows it here)", flush=True)  # fmt: skip
    try:
        with lightning_otel.quiet(args.log_file, verbose=args.verbose), policy_model(source) as model:
            config = OmegaConf.merge(base_config(model, agent_name=agent_name, has_val=bool(val_tasks)), user_config)
            options = lightning_otel.TrainingOptions(
                advantage=args.advantage, gateway_host=args.gateway_host, max_staleness=args.max_staleness
            )
            algorithm = lightning_otel.VERL(config, options, overrides=overrides)  # a line a step
            trainer = lightning_otel.Trainer(
                n_runners=args.runners,
                algorithm=algorithm,
                adapter={"agent_match": args.agent_match, "process_rewards": args.process_rewards},
                initial_resources={"main_llm": lightning_otel.LLM("http://gateway-not-started/v1", model)},
                **collector_options(args),
            )
            result = trainer.fit(agent, tasks, val_tasks)
    except (ValueError, OSError, lightning_otel.ModelUnavailable) as exc:  # a bad config value, a port taken, ...
        print(f"lightning-otel train: {exc}", file=sys.stderr)
        return 2
    except lightning_otel.NothingTrained as exc:
        print(f"lightning-otel train: FAILED: {exc}", file=sys.stderr)
        return 1
    rewards = ", ".join(f"{reward:.4f}" for reward in result.rewards())
    skipped = [record for record in result.steps if record.skipped_because]
    print(f"trained {len(result.steps) - len(skipped)} of {len(result.steps)} steps; reward per step: {rewards}")
    for record in skipped:
        print(f"step {record.step} trained nothing: {'; '.join(record.skipped_because)}", file=sys.stderr)
    return 0 if result.steps else 1


def collector_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Trainer's collector and runner arguments: a running collector, or where the embedded one listens; runner
    actors on Ray when asked."""
    import lightning_otel
    from lightning_otel.collector.server import CollectorConfig
    from lightning_otel.runtime.trainer import refuse_embedded_when_unmanaged

    refuse_embedded_when_unmanaged(args.collector)
    embedded = CollectorConfig.embedded(host=args.collector_host, http_port=args.otlp_port,
                                        query_port=args.collector_port)  # fmt: skip
    runners = None
    if args.runners_on == "ray":
        runners = lightning_otel.RayRunners(n=args.runners, num_cpus=args.runner_cpus, address=args.ray_address)
    elif args.ray_address or args.runner_cpus != 1.0:  # not silently ignored
        raise ValueError("--ray-address and --runner-cpus are for runner actors: add --runners-on ray")
    return {
        "runners": runners,
        "collector": args.collector or embedded,
        "policy_notify_file": args.policy_notify_file,
        "span_wait_s": args.span_wait_s,
    }


def _dev(args: argparse.Namespace, agent: Any, tasks: list) -> int:
    import lightning_otel

    if bool(args.base_url) == bool(args.test_server):
        print("lightning-otel train --dev: give --base-url URL or --test-server", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        base_url = args.base_url
        if args.test_server:
            from lightning_otel.testing import OpenAITestServer

            base_url = stack.enter_context(OpenAITestServer()).base_url
        trainer = lightning_otel.Trainer(
            n_runners=args.runners,
            adapter={"agent_match": args.agent_match},
            initial_resources={"main_llm": lightning_otel.LLM(base_url, args.model or "agl-tiny")},
            **collector_options(args),
        )
        try:
            result = trainer.dev(agent, tasks, n_tasks=args.n_tasks, gateway=args.gateway)
        except lightning_otel.AllRolloutsFailed as exc:
            print(f"lightning-otel train --dev: FAILED: {exc}", file=sys.stderr)
            return 1
    if not any(batch.triplets() for batch in result.train + result.val):
        print("lightning-otel train --dev: FAILED: no rollout gave a training sample (reasons above)", file=sys.stderr)
        return 1
    return 0
