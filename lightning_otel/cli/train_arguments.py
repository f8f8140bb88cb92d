"""The flags of `lightning-otel train`, in groups (the CLI reference page lists them as the parser has them)."""

from __future__ import annotations

import argparse
import re

from lightning_otel.collector.client import collector_url_argument
from lightning_otel.collector.tcp_listener import port_number
from lightning_otel.runs.recipes import ALGORITHMS


def regex(text: str) -> str:
    """argparse `type=`: a regular expression that compiles (`--agent-match`)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {exc}") from None
    return text


def policy_pair(text: str) -> tuple[str, str]:
    """`--policy plan=planner` -> ("plan", "planner"), checked as `agent_match` checks a mapping."""
    from lightning_otel.adapters.policy_match import PolicyMatch

    pattern, sep, name = text.rpartition("=")
    if not sep or not pattern:
        raise argparse.ArgumentTypeError(f"{text!r} is not PATTERN=NAME (e.g. plan=planner)")
    try:
        PolicyMatch.parse({pattern: name})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return pattern, name


def rollout_limits(text: str) -> dict[str, int | None]:
    """`max_llm_calls=50,max_repeats=4` -> RolloutLimits' fields (0: no limit), names and values checked."""
    from lightning_otel.runner.attempt_watch import RolloutLimits

    limits: dict[str, int | None] = {}
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        name, _, value = part.partition("=")
        if not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"{part!r} is not NAME=WHOLE_NUMBER (e.g. max_llm_calls=50; 0: no limit)")
        limits[name.strip()] = int(value) or None
    try:
        RolloutLimits(**limits)  # type: ignore[arg-type]
    except TypeError:
        known = ", ".join(RolloutLimits.__dataclass_fields__)
        raise argparse.ArgumentTypeError(f"unknown rollout limit(s) {sorted(limits)}: the limits are {known}") from None
    return limits


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
    what = train.add_argument_group("what to train")
    what.add_argument("--agent", required=True, help="the agent as package.module:name (LitAgent or @rollout)")
    what.add_argument("--train", required=True, help="tasks: .jsonl (one JSON object per line), a JSON list, .parquet")
    what.add_argument("--val", help="held-out tasks, same format: validated before the first step and after the last")
    what.add_argument("--model", help="the policy: smollm2 (SmolLM2-135M-Instruct, built once offline), tiny (a tiny "
                      "random model built offline), or a Hugging Face model folder")  # fmt: skip
    what.add_argument("--tiny-model", action="store_true", help="the same as --model tiny")
    what.add_argument("--agent-match", type=regex, default=None,
                      help="regex on gen_ai.agent.name selecting the trained calls (default: every agent's, said "
                           "at the first step when there are several)")  # fmt: skip
    what.add_argument("--policy", action="append", type=policy_pair, metavar="PATTERN=NAME", dest="policies",
                      help="a policy per agent (tinker): the calls of the agents PATTERN matches train, and are served "
                           "by, policy NAME (repeat for each; instead of --agent-match); the run's model/ holds one "
                           "folder per policy")  # fmt: skip
    what.add_argument("--algorithm", choices=ALGORITHMS,
                      help="verl (GRPO; the default with a GPU, or when verl keys are given), tinker (GRPO with LoRA "
                           "on the local engine; the default without a GPU), dpo (online DPO on pairs of the "
                           "policy's own rollouts), sft (rejection sampling: fine-tune on the rollouts that reached "
                           "--min-reward)")  # fmt: skip

    run = train.add_argument_group("the run (each unset value comes from the model's recipe; the run prints which)")
    run.add_argument("--steps", type=int, help="training steps")
    run.add_argument("--epochs", type=int, help="instead of --steps: passes over the train tasks")
    run.add_argument("--tasks-per-step", type=int, help="tasks a step (each one GRPO group)")
    run.add_argument("--group-size", type=int, help="rollouts of each task a step")
    run.add_argument("--learning-rate", type=float, help="the optimizer's learning rate")
    run.add_argument("--temperature", type=float, help="sampling temperature while training (validation: greedy and "
                     "this)")  # fmt: skip
    run.add_argument("--max-tokens", type=int, help="reply tokens a call at most (an agent asking for fewer gets "
                     "fewer)")  # fmt: skip
    run.add_argument("--lora-rank", type=int, help="LoRA rank (tinker, dpo)")
    run.add_argument("--max-minutes", type=float, help="a time budget for the steps: the step that would overrun it is "
                     "the last, and validates (the recipe's on a CPU-sized model)")  # fmt: skip
    run.add_argument("--val-samples", type=int, help="sampled validation: each val task this many times at the "
                     "training temperature, beside greedy (0: greedy only)")  # fmt: skip
    run.add_argument("--min-reward", type=float, default=1.0, help="sft: the reward a rollout needs to be kept (1)")
    run.add_argument("--seed", type=int, default=0, help="shuffling, sampling and LoRA initialisation (default 0)")
    run.add_argument("--advantage", choices=["grpo", "anchor"], default="grpo",
                     help="grpo: every call of a rollout gets its final reward's advantage (default); anchor: "
                          "per-call credit (returns and anchor states from the traces)")  # fmt: skip
    run.add_argument("--max-staleness", type=int, default=0, metavar="K",
                     help="0: synchronous steps (default); K >= 1: asynchronous training, the runners never wait "
                          "for the update and samples are at most K policy versions old")  # fmt: skip
    run.add_argument("--refill-tied-groups", type=float, default=0.0, metavar="FACTOR",
                     help="replace a group whose rewards all tie with groups of further tasks, drawing at most "
                          "FACTOR x the step's tasks more (default 0: no refill)")  # fmt: skip
    run.add_argument("--distill-context", metavar="TEMPLATE",
                     help="on-policy self-distillation (tinker): the policy, with this context before the prompt "
                          "({field}s filled from each task, e.g. 'A correct query: {query}'), scores every token "
                          "the student sampled; its per-token signal is added to the reward advantage")  # fmt: skip
    run.add_argument("--teacher", metavar="MODEL",
                     help="on-policy distillation from another model (a name or a folder with the student's "
                          "tokenizer) instead of the policy itself")  # fmt: skip
    run.add_argument(
        "--distill-weight",
        type=float,
        default=1.0,
        help="the teacher's per-token signal against the reward advantage (default 1)",
    )
    run.add_argument(
        "--distill-alone", action="store_true", help="train on the teacher's signal alone, not the reward advantage"
    )
    run.add_argument("--teacher-check", action="store_true",
                     help="before the first step, answer the --val tasks as the student and as the teacher (the "
                          "policy with --distill-context) at the training temperature; stop unless the teacher "
                          "scores higher")  # fmt: skip
    run.add_argument("--process-rewards", type=process_rewards, default=None, metavar="NAME=VALUE,...",
                     help="penalties read from the traces, e.g. tool_error=-0.5,truncated=-0.2 (also "
                          "call_error)")  # fmt: skip
    run.add_argument("--ci-fast", action="store_true",
                     help="the smallest real run: the tiny model (unless --model), 2 steps of 2 tasks x 2, 16 reply "
                          "tokens")  # fmt: skip

    folder = train.add_argument_group("the run folder")
    folder.add_argument("--run-dir", help="where the run keeps everything: store, settings, metrics, curve, model "
                        "(default runs/<agent>-<date>-<time>; its name is the run's id)")  # fmt: skip
    folder.add_argument("--save-every", type=int, default=0, help="a checkpoint every N steps (always after the last)")
    folder.add_argument("--resume", action="store_true",
                        help="continue the run in --run-dir after its latest checkpoint (tinker; the same command "
                             "again, with --save-every for checkpoints to resume from)")  # fmt: skip
    folder.add_argument(
        "--no-content",
        dest="capture_content",
        action="store_false",
        help="leave message text off the spans (token ids only; exports then have no messages)",
    )
    folder.add_argument("--log-file", help="where other libraries' output goes (default: train.log in the run folder)")
    folder.add_argument("-v", "--verbose", action="store_true",
                        help="other libraries' output here, and a failed rollout's traceback")  # fmt: skip

    warm = train.add_argument_group("warm start (supervised, before the RL steps, same run)")
    warm.add_argument("--warm-start", metavar="FILE",
                      help="chats with their tools, {\"messages\": [...], \"tools\": [...]} a line (or `lightning-otel "
                           "export --shape sft` rows) the model is fine-tuned on first")  # fmt: skip
    warm.add_argument("--warm-start-teacher", metavar="URL",
                      help="an OpenAI-compatible endpoint the agent runs against first; its calls in rollouts that "
                           "reach --min-reward are the examples")  # fmt: skip
    warm.add_argument("--warm-start-teacher-model", default="teacher", help="the teacher's model name (teacher)")
    warm.add_argument("--warm-start-tasks", type=int, default=16, help="train tasks run against the teacher (16)")
    warm.add_argument("--warm-start-epochs", type=float, default=2.0, help="passes over the examples (2)")
    warm.add_argument("--warm-start-learning-rate", type=float, help="default: the model's recipe's")

    dev = train.add_argument_group("dry run (--dev: no training, every rollout printed)")
    dev.add_argument("--dev", action="store_true", help="a few tasks through Trainer.dev, all printed: spans, samples, "
                     "rewards and what each agent said")  # fmt: skip
    dev.add_argument("--n-tasks", type=int, default=None, help="run only the first N tasks (default: all)")
    dev.add_argument("--base-url", help="the policy's OpenAI-compatible endpoint (default: --model served here)")
    dev.add_argument("--test-server", action="store_true", help="the scripted test server instead of a model")
    dev.add_argument("--gateway", action="store_true", help="a policy gateway in front of --base-url, as in training "
                     "(agents not instrumented); always on when --model is served")  # fmt: skip

    where = train.add_argument_group("runners and collector")
    where.add_argument("--runners", type=int, default=2, help="runners (default 2)")
    where.add_argument("--runners-on", choices=["local", "ray"], default="local",
                       help="local: runner processes on this machine (default); ray: runner actors on a Ray cluster "
                            "(verl's, or the one at --ray-address)")  # fmt: skip
    where.add_argument("--ray-address", default=None,
                       help="--runners-on ray: the cluster verl and the runners join (auto, host:6379)")  # fmt: skip
    where.add_argument("--runner-cpus", type=float, default=1.0, help="--runners-on ray: CPUs each actor reserves")
    where.add_argument("--gateway-host", default="127.0.0.1",
                       help="where the policy gateway listens; 0.0.0.0: runners on other machines reach it by this "
                            "machine's name")  # fmt: skip
    where.add_argument("--collector", type=collector_url_argument,
                       help="a running agl-otel-collector's query URL (default: an embedded one over the run "
                            "folder's store)")  # fmt: skip
    where.add_argument("--collector-port", type=port_number, default=0,
                       help="the embedded collector's API port (default: a free one)")  # fmt: skip
    where.add_argument("--otlp-port", type=port_number, default=0,
                       help="the embedded collector's OTLP/HTTP port: where agent services send spans")  # fmt: skip
    where.add_argument("--collector-host", default="127.0.0.1", help="0.0.0.0: reachable from other machines")
    where.add_argument("--policy-notify-file",
                       help="write the policy's address here (default $LLM_SERVER_NOTIFY_FILE)")  # fmt: skip
    where.add_argument("--span-wait-s", type=float, default=30.0,
                       help="bound on waiting for spans other processes export late (default 30)")  # fmt: skip
    where.add_argument("--rollout-timeout", type=float, default=900.0, metavar="SECONDS",
                       help="an attempt running longer is stopped and retried, as an infrastructure failure: a hung "
                            "tool call (default 900; 0: none)")  # fmt: skip
    where.add_argument("--rollout-limits", type=rollout_limits, default={}, metavar="NAME=N,...",
                       help="the runners' no-progress limits (RolloutLimits: max_llm_calls=500, max_repeats=8, "
                            "max_empty=8, max_without_tool_call=25, max_completion_tokens=1000000; "
                            "0: none)")  # fmt: skip

    engine = train.add_argument_group("verl's own keys (they imply --algorithm verl)")
    engine.add_argument("--config", help="a verl config file (YAML) merged over the run's settings")
    engine.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="verl config keys, dotted (actor_rollout_ref.actor.optim.lr=1e-5), applied last",
    )


__all__ = ["add_arguments", "policy_pair", "process_rewards", "regex", "rollout_limits"]
