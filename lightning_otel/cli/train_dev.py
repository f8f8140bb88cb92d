"""`lightning-otel train --dev`: a dry run, no training. A few tasks through `Trainer.dev` against the policy as
training will serve it (`--model` served here as vLLM serves it, a policy gateway in front enforcing the run's
sampling), or against an endpoint (`--base-url`) or the scripted test server (`--test-server`); every rollout is
printed: its spans, the samples `agent_match` selects, its reward, and what each agent said."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

import lightning_otel
from lightning_otel.cli.collector_flags import collector_options, run_settings, runner_options


def run_dev(args: argparse.Namespace, agent: Any, tasks: list[Any], val_tasks: list[Any]) -> int:
    sources = [flag for flag, given in (("--base-url", args.base_url), ("--test-server", args.test_server)) if given]
    if len(sources) > 1:
        print("lightning-otel train --dev: give --base-url URL or --test-server, not both", file=sys.stderr)
        return 2
    model = args.model or ("tiny" if args.tiny_model else None)
    if not sources and model is None:
        print("lightning-otel train --dev: give --model (served here as training serves it), --base-url URL or "
              "--test-server", file=sys.stderr)  # fmt: skip
        return 2
    try:
        options = collector_options(args)
    except ValueError as exc:
        print(f"lightning-otel train --dev: {exc}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        sampling: dict[str, Any] = {}
        if args.test_server:
            from lightning_otel.testing import OpenAITestServer

            base_url, served_as, gateway = stack.enter_context(OpenAITestServer()).base_url, "agl-tiny", args.gateway
        elif args.base_url:
            base_url, served_as, gateway = args.base_url, model or "agl-tiny", args.gateway
        else:
            try:
                base_url, sampling = served_model(args, model, stack)
            except (OSError, ValueError, lightning_otel.ModelUnavailable) as exc:
                print(f"lightning-otel train --dev: {exc}", file=sys.stderr)
                return 2
            served_as, gateway = "agl-policy", True  # the sampling enforced, as in training
        trainer = lightning_otel.Trainer(
            n_runners=args.runners,
            adapter={"agent_match": dict(args.policies) if args.policies else args.agent_match},
            initial_resources={"main_llm": lightning_otel.LLM(base_url, served_as, sampling_parameters=sampling)},
            **options,
            settings=run_settings(args),
            runner_options=runner_options(args, args.capture_content),  # what each said
        )
        try:
            result = trainer.dev(agent, tasks, n_tasks=args.n_tasks, gateway=gateway)
        except lightning_otel.AllRolloutsFailed as exc:
            print(f"lightning-otel train --dev: FAILED: {exc}", file=sys.stderr)
            return 1
    if not any(batch.triplets() for batch in result.train + result.val):
        print("lightning-otel train --dev: FAILED: no rollout gave a training sample (reasons above)", file=sys.stderr)
        return 1
    return 0


def served_model(args: argparse.Namespace, model: str, stack: contextlib.ExitStack) -> tuple[str, dict[str, Any]]:
    """The model folder served as training serves it, and the training's sampling (its recipe's, or the flags')."""
    from lightning_otel.runs.plan import Asked, resolve_plan
    from lightning_otel.testing import model_or_tiny, serve_folder

    folder = model_or_tiny(model, stack.enter_context(_scratch()), seed=args.seed)
    asked = Asked(algorithm=args.algorithm, temperature=args.temperature, max_tokens=args.max_tokens)
    named = model if model in ("smollm2", "tiny") else None
    plan = resolve_plan(asked, model=named or str(folder), folder=None if named else folder, train_tasks=1,
                        val_tasks=0, gpu=False)  # fmt: skip
    print(f"dry run against {model} ({folder}) served here: temperature {plan.temperature:g}, at most "
          f"{plan.max_tokens} reply tokens a call [{plan.sources['temperature']}]", flush=True)  # fmt: skip
    with lightning_otel.quiet(args.log_file or "lightning-otel-dev.log", verbose=args.verbose):  # the loading's
        base_url = stack.enter_context(serve_folder(folder, seed=args.seed))  # output; the dry run's on the terminal
    return base_url, {"temperature": plan.temperature, "top_p": plan.top_p, "max_tokens": plan.max_tokens}


@contextlib.contextmanager
def _scratch() -> Any:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="agl-dev-") as directory:
        yield Path(directory)


__all__ = ["run_dev"]
