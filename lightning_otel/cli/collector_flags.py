"""The collector and runner flags of `lightning-otel train` (and its dry run) as the Trainer's arguments."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from typing import Any


def collector_options(args: argparse.Namespace, store_url: str | None = None) -> dict[str, Any]:
    """The Trainer's collector and runners: a running collector, or the embedded one (over `store_url`); runner
    actors on Ray when asked."""
    import lightning_otel
    from lightning_otel.collector.server import CollectorConfig
    from lightning_otel.runtime.trainer import refuse_embedded_when_unmanaged

    refuse_embedded_when_unmanaged(args.collector)
    embedded = CollectorConfig.embedded(host=args.collector_host, http_port=args.otlp_port,
                                        query_port=args.collector_port)  # fmt: skip
    if store_url is not None:
        embedded = replace(embedded, store_url=store_url)
    runners = None
    if args.runners_on == "ray":
        runners = lightning_otel.RayRunners(n=args.runners, num_cpus=args.runner_cpus, address=args.ray_address)
    elif args.ray_address or args.runner_cpus != 1.0:  # not silently ignored
        raise ValueError("--ray-address and --runner-cpus are for runner actors: add --runners-on ray")
    return {"runners": runners, "collector": args.collector or embedded}


def check_collector_reachable(url: str | None) -> None:
    """A `--collector` that does not answer now is said at once, in one line (`CollectorUnreachable`), not after the
    client's five minutes of riding out a fault that was never a fault: nothing was ever listening."""
    if url is None:
        return
    from lightning_otel.collector.client import Client, CollectorError

    try:
        with Client(url, auth_token=os.environ.get("AGL_COLLECTOR_AUTH_TOKEN"), retry_for_s=0) as client:
            client.collector_info()
    except CollectorError as exc:
        raise CollectorUnreachable(
            f"no collector answers at {url} ({exc}); start one (`agl-otel-collector --port PORT`) or leave out "
            "--collector to use an embedded one"
        ) from None


class CollectorUnreachable(RuntimeError):
    """`--collector` names an address where no collector answers: one line, exit 1."""


def run_settings(args: argparse.Namespace, run_id: str | None = None) -> Any:
    """The Trainer's `RunSettings` from the flags (the policy's notify file, the late-span wait, an attempt's time
    limit) and a run id."""
    import lightning_otel

    timeout = getattr(args, "rollout_timeout", None) or None  # 0: none
    return lightning_otel.RunSettings(run_id=run_id, policy_notify_file=args.policy_notify_file,
                                      span_wait_s=args.span_wait_s, rollout_timeout_s=timeout)  # fmt: skip


def runner_options(args: argparse.Namespace, capture_content: bool | None) -> Any:
    """The Trainer's `RunnerOptions` from the flags: message content, and the no-progress limits (`--rollout-limits`
    over RolloutLimits' defaults)."""
    import lightning_otel

    limits = lightning_otel.RolloutLimits(**(getattr(args, "rollout_limits", None) or {}))
    return lightning_otel.RunnerOptions(capture_content=capture_content, limits=limits)


__all__ = ["CollectorUnreachable", "check_collector_reachable", "collector_options", "run_settings", "runner_options"]
