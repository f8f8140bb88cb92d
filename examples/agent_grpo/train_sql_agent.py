"""Train the medical SQL agent with GRPO (VERL), rewarded by a reward model: the tutorial's `train_sql_agent.py`.

    python train_sql_agent.py --ci-fast                                   # 2 GRPO steps on CPU (a tiny policy)
    python train_sql_agent.py --model /path/to/model --collector http://127.0.0.1:16686   # the full run

Before it: the reward model is served (`lightning-otel reward-model serve --model rm/ --port 8010`, see README.md).
The agent (agent.py, OpenAI Agents SDK) runs in runner processes: in this Python (`--n-runners`), or with
`--runner-python PATH` in another environment (the Agents SDK wants openai >= 3, verl's environment may not have it):
the script starts `PATH -m lightning_otel.cli runner --agent agent:medical_rollout` processes that claim rollouts
from the collector. `--collector URL` uses a running `agl-otel-collector` (the seed's external store); otherwise an
embedded one stores everything in `--store` (default runs/collector.sqlite3), which `agl-otel-collector --store ...`
serves afterwards with its `/ui`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

import lightning_otel as agl
from lightning_otel.collector import CollectorConfig

HERE = Path(__file__).resolve().parent
AGENT = "agent:medical_rollout"


def cpu_config(model: Path, tasks_per_step: int) -> dict[str, Any]:
    return {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": tasks_per_step, "max_prompt_length": 1536, "max_response_length": 48},
        "actor_rollout_ref": {
            "model": {"path": str(model)},
            "rollout": {"n": 2, "temperature": 1.0, "log_prob_micro_batch_size_per_gpu": 8},
            "actor": {"ppo_mini_batch_size": tasks_per_step, "ppo_micro_batch_size_per_gpu": 8, "optim": {"lr": 1e-4}},
        },
        "trainer": {"val_before_train": False, "test_freq": -1, "save_freq": -1},
    }


def gpu_config(model: str) -> dict[str, Any]:
    """The seed's settings, scaled to one GPU."""
    return {
        "algorithm": {"adv_estimator": "grpo"},
        "data": {"train_batch_size": 16, "max_prompt_length": 4096, "max_response_length": 1024},
        "actor_rollout_ref": {
            "rollout": {"name": "vllm", "n": 4, "multi_turn": {"format": "hermes"}},
            "actor": {"ppo_mini_batch_size": 16, "optim": {"lr": 1e-6}},
            "model": {"path": model},
        },
        "trainer": {"n_gpus_per_node": 1, "val_before_train": True, "test_freq": 8, "save_freq": 32},
    }


def tiny_policy(directory: Path, tasks: list[dict[str, Any]]) -> Path:
    """A tiny random model with a BPE trained on the agent's own text, so prompts stay short on CPU."""
    from medical_data import INSTRUCTIONS

    from lightning_otel.testing import save_tiny_model, train_tokenizer

    lines = [INSTRUCTIONS, "run_sql query SELECT FROM WHERE name"] + [t["question"] for t in tasks]
    tokenizer = train_tokenizer(lines + [t["answer"] for t in tasks], vocab_size=1024, space_after_words=True)
    return save_tiny_model(directory, hidden_size=64, layers=2, tokenizer=tokenizer, architecture="llama")


def check_reward_model(url: str, api_key: str | None) -> str:
    """The served reward model's name; exits with what to run when the service is not up."""
    try:
        health = httpx.get(url.rstrip("/") + "/healthz", timeout=10).json()
    except (httpx.HTTPError, ValueError) as exc:
        sys.exit(
            f"train_sql_agent: no reward model at {url} ({exc}). Start it first:\n"
            f"  lightning-otel reward-model serve --model runs/reward_model --port {url.rsplit(':', 1)[-1]}"
        )
    if health.get("status") != "ok":
        sys.exit(f"train_sql_agent: the reward model at {url} is not ready: {health}")
    return str(health["model"])


def loggers(requested: str) -> list[str]:
    """verl's trackers; wandb/swanlab only when installed (asked for and missing: an error, not a silent skip)."""
    chosen = [name for name in requested.split(",") if name]
    for name in chosen:
        if name in ("wandb", "swanlab", "tensorboard", "mlflow") and importlib.util.find_spec(name) is None:
            sys.exit(f"train_sql_agent: --logger {name} needs `pip install {name}`")
    return chosen


def start_runners(python: str, trainer: agl.Trainer, count: int, stop: threading.Event) -> list[subprocess.Popen]:
    """Runner processes in another environment, started once the trainer's collector answers."""
    deadline = time.monotonic() + 300
    while not stop.is_set() and time.monotonic() < deadline:
        collector = getattr(trainer, "collector_url", None)
        try:
            if collector and httpx.get(collector + "/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        return []
    command = [python, "-m", "lightning_otel.cli", "runner", "--collector", collector, "--agent", AGENT]
    return [subprocess.Popen([*command, "--runner-id", f"agent-env-{index}"], cwd=HERE) for index in range(count)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci-fast", action="store_true", help="2 GRPO steps on 4 questions, no validation")
    parser.add_argument("--model", default="tiny", help="a local model directory; 'tiny' builds one offline (CPU)")
    parser.add_argument("--data", type=Path, default=HERE / "data", help="medical_data.py's folder (made if absent)")
    parser.add_argument("--reward-model-url", default="http://127.0.0.1:8010")
    parser.add_argument("--reward-model-api-key")
    parser.add_argument(
        "--collector",
        "--external-store-address",
        dest="collector",
        help="a running agl-otel-collector's query URL (default: an embedded one)",
    )
    parser.add_argument("--collector-port", type=int, default=16686, help="the embedded collector's API port")
    parser.add_argument("--llm-proxy", action="store_true",
                        help="Agent Lightning's flag: here the policy gateway always proxies the agents' LLM calls "
                             "(accepted; says so)")  # fmt: skip
    parser.add_argument("--store", help="the embedded collector's store (default sqlite:///WORKDIR/collector.sqlite3)")
    parser.add_argument("--n-runners", type=int, default=2)
    parser.add_argument("--runner-python", help="run the agent's runners with this Python (another environment)")
    parser.add_argument("--agent-match", default=f"^{'MedicalSQLAgent'}$")
    parser.add_argument("--steps", type=int, help="GRPO steps (default: one epoch)")
    parser.add_argument("--logger", default="console", help="trackers, e.g. console,wandb,swanlab (default: console)")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--workdir", type=Path, default=HERE / "runs")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="other libraries' output here (default: train.log in --workdir)")  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.environ.get("AGL_MANAGED_STORE", "").strip().lower() in ("0", "false", "no") and not args.collector:
        print("train_sql_agent: AGL_MANAGED_STORE=0 starts no collector here; give the running one's address: "
              "--external-store-address http://localhost:9999 (`agl store --port 9999` starts one)",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.llm_proxy:
        print("--llm-proxy: the policy gateway proxies every LLM call of the agents here (token ids, versions); "
              "nothing more to turn on", flush=True)  # fmt: skip
    if not (args.data / "questions_train.jsonl").exists():
        from medical_data import write_all

        write_all(args.data)
    os.environ["AGL_MEDICAL_DB"] = str((args.data / "medical.sqlite3").resolve())  # the agent's database, in runners
    train_data = agl.load_tasks(args.data / "questions_train.jsonl")
    val_data = agl.load_tasks(args.data / "questions_test.jsonl")
    steps = args.steps
    if args.ci_fast:
        train_data, val_data, steps = train_data[:4], [], 2
    rm_name = check_reward_model(args.reward_model_url, args.reward_model_api_key)
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    args.workdir.mkdir(parents=True, exist_ok=True)
    if device == "cpu":
        model = args.model if args.model != "tiny" else str(tiny_policy(args.workdir / "model-tiny", train_data))
        config = cpu_config(Path(model), tasks_per_step=2)
    else:
        model = args.model
        config = gpu_config(model)
    config["trainer"].update(
        logger=loggers(args.logger),
        default_local_dir=str(args.workdir / "checkpoints"),
        project_name="agent-grpo",
        experiment_name="medical-sql",
    )
    config["trainer"]["total_epochs"] = 1000 if steps else 1
    if steps:
        config["trainer"]["total_training_steps"] = steps
    store = args.store or f"sqlite:///{args.workdir / 'collector.sqlite3'}"
    print(
        f"GRPO with VERL on {device}: {len(train_data)} questions, reward = execution + 0.5 x reward model "
        f"{rm_name!r} ({args.reward_model_url}), agent_match={args.agent_match!r}",
        flush=True,
    )
    trainer = agl.Trainer(
        n_runners=0 if args.runner_python else args.n_runners,
        algorithm=agl.VERL(config, device=device),
        adapter={"agent_match": args.agent_match},
        initial_resources={
            "main_llm": agl.LLM("http://unused.invalid/v1", model),  # VERL serves the policy through its gateway
            "reward_model": {"url": args.reward_model_url, "api_key": args.reward_model_api_key},
        },
        # a running collector, or one embedded here on a port the runners elsewhere are told, keeping its store
        collector=args.collector or CollectorConfig.embedded(query_port=args.collector_port, store_url=store),
        progress=False,
        # Runners this script starts in another environment: if none claims a batch in 3 minutes, they failed.
        settings=agl.RunSettings(no_runner_timeout_s=180 if args.runner_python else None),
    )
    stop, runners = threading.Event(), []
    if args.runner_python:
        count = max(1, args.n_runners)
        threading.Thread(
            target=lambda: runners.extend(start_runners(args.runner_python, trainer, count, stop)), daemon=True
        ).start()
    try:
        if not args.verbose:
            print(f"other libraries' output (Ray, verl, the runners): {args.workdir / 'train.log'}", flush=True)
        with agl.quiet(args.workdir / "train.log", verbose=args.verbose):
            result = trainer.fit(AGENT, train_dataset=train_data, val_dataset=val_data or None)
    except agl.NothingTrained as exc:
        print(f"train_sql_agent: FAILED: {exc}", file=sys.stderr)
        return 1
    except agl.NoRunner as exc:
        exits = [runner.poll() for runner in runners]
        print(f"train_sql_agent: FAILED: {exc}; the runners started here ({args.runner_python}) exited with "
              f"{exits} (None: still running); their output is in {args.workdir / 'train.log'}",
              file=sys.stderr)  # fmt: skip
        return 1
    finally:
        stop.set()
        for runner in runners:
            runner.terminate()
            runner.wait(30)
    steps_done = [{"step": r.step, "metrics": r.metrics, "sample_agents": r.sample_agents} for r in result.steps]
    summary = {"steps": steps_done, "reward_model": rm_name, "store": None if args.collector else store}
    (args.workdir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    samples = sum(r.metrics.get("rollout/triplets", 0) for r in result.steps)
    print(f"done: {len(steps_done)} GRPO steps, {samples:.0f} samples; {args.workdir / 'summary.json'}")
    if not args.collector:
        print(
            f"see each rollout, its reward-model score and the call it judged: agl-otel-collector --store {store} "
            f"--query-port 16687 --http-port 4319 --grpc-port -1, then http://127.0.0.1:16687/ui"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
