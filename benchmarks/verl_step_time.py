"""Seconds per GRPO step on CPU: our path vs verl's own agent loop, same tiny model, same batch, same reward.

    python -m benchmarks.verl_step_time [--steps 12]                   # CPU: needs the [demo] extra (verl, torch)
    python -m benchmarks.verl_step_time --device cuda [--steps 12]     # GPU: vLLM replicas (benchmarks/gpu/)

- ours: `Trainer` + `VERL`: an instrumented agent (one OpenAI chat call) in a runner process calls the policy
  gateway, which forwards to the CPU replica; spans go over OTLP to the embedded collector; the trainer reads them
  back, `agent_match` selects, `build_batch` builds the rows, then verl's step.
- verl: verl's `RayPPOTrainer.fit` with its `single_turn_agent` agent loop calling the same replica token-in /
  token-out, rewards from verl's reward loop with the same function.
Both: the tiny offline Qwen2 (hidden 256 on GPU: vLLM's attention kernels want head_dim 64), 4 tasks x n=4 per step,
12 response tokens, temperature 1, reward = capital-letter share of the answer; on CPU our CPU backend under verl,
on GPU verl's vLLM replicas. Each path runs in its own process (its own Ray); the figure is the
mean of verl's `timing_s/step` over steps 3..N (start-up and the first steps excluded), beside `timing_s/gen`.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import lightning_otel

ROOT = Path(__file__).resolve().parents[1]

PROMPT = "Say it in CAPITAL LETTERS: {word}"
WORDS = ["orders", "customers", "revenue", "products", "invoices", "shipments", "refunds", "suppliers"] * 4


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """verl's custom reward function (this file is `reward.custom_reward_function.path` in verl's run)."""
    from lightning_otel.cli.train_demo import capitals_share

    return capitals_share(solution_str)


@functools.cache
def _client(base_url: str) -> Any:
    """One client per process: building an OpenAI client loads certifi's CA bundle (~20 ms of CPU), which verl's
    own loop never pays; the instrumented client carries the rollout in its headers, so the gateway's plain
    endpoint serves every rollout (a per-rollout `get_base_url` would build a client per rollout)."""
    import openai

    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=5)


@lightning_otel.rollout
def answer(task: dict[str, Any], resources: dict[str, Any], rollout: Any) -> float:
    """Our path's agent, at module level so the runner processes can import it (by this file's module name)."""
    from lightning_otel.cli.train_demo import capitals_share

    llm = resources["main_llm"]
    client = _client(llm.endpoint)
    with lightning_otel.agent("write"):
        reply = client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": PROMPT.format(word=task["word"])}]
        )
    return capitals_share(reply.choices[0].message.content or "")


GPU_OVERRIDES = [
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "trainer.n_gpus_per_node=1",
    "trainer.device=cuda",
]


def config(model: Path, steps: int, work: Path) -> dict[str, Any]:
    """The demo's run (4 tasks x n=4, 12 response tokens), without checkpoints or a logger; with the demo's
    learning rate and sampling for the model it runs (SmolLM2's when the model folder is SmolLM2's)."""
    from lightning_otel.cli.train_demo import POLICIES, demo_config

    policy = POLICIES["smollm2" if (model / "agl-model-source.json").exists() else "tiny"]
    return demo_config(model, steps, work, policy)


def run_ours(model: Path, steps: int, work: Path, device: str) -> list[dict[str, float]]:
    from benchmarks._rollout_phases import run_phases
    from lightning_otel.collector import EmbeddedCollector

    overrides = GPU_OVERRIDES if device == "cuda" else []
    # the collector a Trainer would start, kept open after fit to read where the rollouts' time went
    with EmbeddedCollector.on_sqlite_file(work / "ours-collector.sqlite3") as addresses:
        trainer = lightning_otel.Trainer(
            n_runners=1,
            algorithm=lightning_otel.VERL(config(model, steps, work), device=device, overrides=overrides),
            adapter={"agent_match": "write"},
            initial_resources={"main_llm": lightning_otel.LLM("http://replaced/v1", "policy")},
            collector=addresses.query,
            progress=False,
        )
        result = trainer.fit(answer, [{"id": f"t{i}", "word": word} for i, word in enumerate(WORDS)])
        (work / "ours-phases.json").write_text(json.dumps(run_phases(addresses.query, skip_batches=2)))
    return [record.metrics for record in result.steps]


def verl_own_config(model: Path, steps: int, work: Path, device: str, extra: list[str]) -> Any:
    """verl's own run of the same task: a parquet of the prompts, verl's agent loop and reward loop."""
    import pandas as pd

    from lightning_otel.training.verl.config import compose_verl_config

    rows = [
        {
            "data_source": "capitals",
            "prompt": [{"role": "user", "content": PROMPT.format(word=word)}],
            "reward_model": {"ground_truth": ""},
            "extra_info": {"index": index},
        }
        for index, word in enumerate(WORDS)
    ]
    data = work / "train.parquet"
    pd.DataFrame(rows).to_parquet(data)
    return compose_verl_config(
        config(model, steps, work),
        cpu=device == "cpu",
        overrides=[
            *(GPU_OVERRIDES if device == "cuda" else []),
            f"data.train_files={data}",
            f"data.val_files={data}",
            "reward.num_workers=1",  # verl's own path: its reward loop and agent loop workers
            "actor_rollout_ref.rollout.agent.agent_loop_manager_class=null",
            f"reward.custom_reward_function.path={Path(__file__).resolve()}",
            "reward.custom_reward_function.name=compute_score",
            *extra,
        ],
    )


def run_verl_v1(model: Path, steps: int, work: Path, device: str) -> list[dict[str, float]]:
    """verl's v1 trainer (`trainer.use_v1=True`: TransferQueue, its agent loop) on the same task; needs the
    `TransferQueue` package. Its trainer runs in a Ray actor: metrics come back through verl's `file` logger."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

    from lightning_otel.training.verl import algorithm as verl_algorithm
    from lightning_otel.training.verl.cpu import cpu_driver

    logged = work / "v1-metrics.jsonl"
    cfg = verl_own_config(model, steps, work, device, [
        "trainer.use_v1=true", "trainer.logger=[file]",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={logged}",
    ])  # fmt: skip
    cpu = contextlib.nullcontext() if device != "cpu" else cpu_driver(verl_algorithm.CPU_ENV)
    with cpu, verl_algorithm._ray_session(cfg, device == "cpu"):
        run_ppo(cfg, task_runner_class=TaskRunnerV1)
    lines = [json.loads(line)["data"] for line in logged.read_text().splitlines() if line.strip()]
    return [metrics for metrics in lines if "timing_s/step" in metrics]


def run_verl(model: Path, steps: int, work: Path, device: str) -> list[dict[str, float]]:
    from lightning_otel.training.verl import algorithm as verl_algorithm
    from lightning_otel.training.verl.cpu import cpu_driver

    cfg = verl_own_config(model, steps, work, device, [])
    import verl.utils.tracking as tracking
    from omegaconf import OmegaConf
    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.config import omega_conf_to_dataclass

    logged: list[dict[str, float]] = []
    tracking.Tracking.log = lambda self, data, step, **kwargs: logged.append(dict(data))  # type: ignore[method-assign]
    cpu = contextlib.nullcontext() if device != "cpu" else cpu_driver(verl_algorithm.CPU_ENV)
    with cpu, verl_algorithm._ray_session(cfg, device == "cpu"):
        OmegaConf.resolve(cfg)
        roles = BaseTaskRunner()
        _, group_cls = roles.add_actor_rollout_worker(cfg)
        roles.add_reward_model_resource_pool(cfg)
        model_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
        trainer = RayPPOTrainer(
            config=cfg,
            tokenizer=model_config.tokenizer,
            processor=None,
            role_worker_mapping=roles.role_worker_mapping,
            resource_pool_manager=roles.init_resource_pool_mgr(cfg),
            ray_worker_group_cls=group_cls,
        )
        trainer.init_workers()
        trainer.fit()
    return [metrics for metrics in logged if "timing_s/step" in metrics]


def child(path: str, steps: int, model: str, work: str, out: str, device: str) -> None:
    runs = {"ours": run_ours, "verl": run_verl, "verl-v1": run_verl_v1}
    metrics = runs[path](Path(model), steps, Path(work), device)
    keep = ("timing_s/step", "timing_s/gen", "timing_s/gen_wait", "timing_s/update_actor", "critic/score/mean")
    Path(out).write_text(json.dumps([{k: float(m[k]) for k in keep if k in m} for m in metrics]))


LABELS = {
    "verl": "verl's own agent loop (single_turn_agent)",
    "verl-v1": "verl's own, v1 trainer (TransferQueue)",
    "ours": "ours: runner + gateway + traces",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    paths_help = "which paths to run, comma-separated: verl, verl-v1 (needs TransferQueue), ours"
    parser.add_argument("--paths", default="verl,ours", help=paths_help)
    parser.add_argument("--child", nargs=4, metavar=("PATH", "MODEL", "WORK", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="3 steps a path (the mean is step 3's): that it runs")
    parser.add_argument("--model", default="tiny",
                        help="tiny (a random Qwen2 built offline, the default), smollm2 (SmolLM2-135M-Instruct) or a "
                             "model folder")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.steps = 3
    if args.child:
        child(args.child[0], args.steps, *args.child[1:], args.device)
        return
    from lightning_otel.testing.tiny_model import save_tiny_model

    paths = [path for path in args.paths.split(",") if path]
    unknown = set(paths) - set(LABELS)
    if unknown:
        parser.error(f"unknown paths {sorted(unknown)}: choose from {', '.join(LABELS)}")
    work = Path(tempfile.mkdtemp(prefix="agl-verl-bench-"))
    if args.model == "tiny":
        model = save_tiny_model(work / "model", hidden_size=256 if args.device == "cuda" else 64)
    else:
        from lightning_otel.models.named import model_folder

        model = model_folder(args.model)
    results: dict[str, list[dict[str, float]]] = {}
    for path in paths:
        out, log = work / f"{path}.json", work / f"{path}.log"
        flags = ["--steps", str(args.steps), "--device", args.device]
        command = [sys.executable, "-m", "benchmarks.verl_step_time", *flags, "--child", path, str(model), str(work),
                   str(out)]  # fmt: skip
        # the child runs in its work folder, as a module of the checkout
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        with log.open("w") as output:
            done = subprocess.run(command, cwd=work, env=env, stdout=output, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            sys.exit(f"the {path} run failed (exit {done.returncode}): see {log}")
        results[path] = json.loads(out.read_text())
        if len(results[path]) != args.steps:
            sys.exit(f"the {path} run logged {len(results[path])} of {args.steps} steps: see {log}")
    policy = "tiny Qwen2" if args.model == "tiny" else args.model
    print(f"GRPO on {args.device}, {policy}, 4 tasks x n=4, 12 response tokens; means over steps 3..{args.steps}")
    print(f"{'path':44} {'s/step':>7} {'gen s':>7} {'update s':>9}")
    means = {}
    for path in paths:
        steps = results[path][2:]
        means[path] = row = {key: statistics.fmean(m[key] for m in steps if key in m) for key in steps[0]}
        print(f"{LABELS[path]:44} {row['timing_s/step']:7.2f} {row['timing_s/gen']:7.2f} "
              f"{row['timing_s/update_actor']:9.2f}")  # fmt: skip
    phases_file = work / "ours-phases.json"
    if "ours" in means and phases_file.exists():
        from benchmarks._rollout_phases import format_run_phases

        row = means["ours"]
        print(
            f"ours, where a step's generation went (steps 3..{args.steps}): gen {row['timing_s/gen'] * 1000:.0f} ms "
            f"= rollouts + the trainer's wait to see them final ({row['timing_s/gen_wait'] * 1000:.0f} ms in all) "
            f"+ read and adapt ({(row['timing_s/gen'] - row['timing_s/gen_wait']) * 1000:.0f} ms)"
        )
        print(format_run_phases(json.loads(phases_file.read_text())))
    for path in paths:
        rewards = " ".join(f"{m.get('critic/score/mean', float('nan')):.3f}" for m in results[path])
        print(f"reward per step, {path}: {rewards}")
    for path in paths:
        if path != "ours" and "ours" in means:
            ratio = means["ours"]["timing_s/step"] / means[path]["timing_s/step"]
            print(f"ratio ours/{path}: {ratio:.2f}x seconds per step")
            ours = results["ours"][2:]
            trained = [m["timing_s/step"] for m in ours if "timing_s/update_actor" in m]
            if len(trained) < len(ours):  # a skipped step (no signal) costs no update: not the same work as verl's
                theirs = statistics.fmean(m["timing_s/step"] for m in results[path][2:])
                shown = f"{statistics.fmean(trained) / theirs:.2f}x" if trained else "none trained"
                print(f"  ours skipped {len(ours) - len(trained)} of {len(ours)} steps (every group's rewards equal: "
                      f"no update); over the steps ours trained: {shown}")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)  # done: a failed run exits above and keeps its logs there


if __name__ == "__main__":
    main()
