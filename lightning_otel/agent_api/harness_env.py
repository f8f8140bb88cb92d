"""The environment that runs a harness (a CLI agent: Claude Code, Codex; a program in another language) unmodified
inside a rollout: its model calls go to the policy gateway under the rollout's path, and its own telemetry goes to
the collector as part of the rollout.

    env = lightning_otel.harness_env(resources["main_llm"], rollout)
    subprocess.run(["claude", "-p", task["prompt"], "--permission-mode", "bypassPermissions"], env=env, cwd=work)

What it sets (over a copy of this process's environment):
- the model: `ANTHROPIC_BASE_URL` (no `/v1`: the Anthropic SDKs and Claude Code add `/v1/messages`) and
  `OPENAI_BASE_URL` (with `/v1`), both the gateway's rollout path (`ProxyLLM.get_base_url`), and dummy API keys;
- telemetry over OTLP/HTTP to the collector: `OTEL_EXPORTER_OTLP_ENDPOINT` (and its bearer token), traces and logs
  on, metrics off, and `OTEL_RESOURCE_ATTRIBUTES` naming the rollout and attempt, so every span and log record the
  harness exports is stored in the rollout (the collector reads the rollout from the resource when a span or record
  does not carry it);
- Claude Code: its telemetry and traces switched on (`CLAUDE_CODE_ENABLE_TELEMETRY`,
  `CLAUDE_CODE_ENHANCED_TELEMETRY_BETA`), no traffic but the model's (`CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`),
  and `IS_SANDBOX=1`, without which `--permission-mode bypassPermissions` exits without a call.

The collector's endpoint: `endpoint`, else the one this runner process exports to, else `OTEL_EXPORTER_OTLP_ENDPOINT`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import quote

from lightning_otel import semconv
from lightning_otel.agent_api.lit_agent import Rollout
from lightning_otel.agent_api.resources import LLM
from lightning_otel.capture.rollout_context import RolloutIdentity

_runner_export: tuple[str, str | None] | None = None  # (OTLP/HTTP endpoint, bearer token) of this runner process


def set_runner_export(endpoint: str, auth_token: str | None) -> None:
    """Where this runner process's spans go: a harness it starts sends its own there (`harness_env`)."""
    global _runner_export
    _runner_export = (endpoint, auth_token)


def harness_env(
    llm: LLM,
    rollout: Rollout | RolloutIdentity,
    *,
    endpoint: str | None = None,
    auth_token: str | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment to run a harness (a CLI agent, a program in another language) in `rollout`, unmodified:

        env = agl.harness_env(resources["main_llm"], rollout)
        subprocess.run(["claude", "-p", task["prompt"], "--permission-mode", "bypassPermissions"], env=env)

    Its model calls go to the policy gateway under the rollout's path (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`);
    its OpenTelemetry traces and logs go to the collector (`OTEL_EXPORTER_OTLP_ENDPOINT`: `endpoint`, else this
    runner's, else the environment's), inside the rollout (`OTEL_RESOURCE_ATTRIBUTES`); Claude Code's telemetry is
    switched on and its other traffic off. `base`: the environment to start from (default: this process's)."""
    env = dict(os.environ if base is None else base)
    if endpoint is None and _runner_export is not None:
        endpoint, auth_token = _runner_export[0], auth_token or _runner_export[1]
    endpoint = endpoint or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not endpoint:
        raise ValueError(
            "harness_env: no collector endpoint is known here: pass endpoint='http://HOST:4318' (outside a runner)"
        )
    model_url = llm.get_base_url(rollout.rollout_id, rollout.attempt_id).rstrip("/")
    api_key = llm.api_key or "EMPTY"
    identity = {semconv.AGL_ROLLOUT_ID: rollout.rollout_id, semconv.AGL_ATTEMPT_ID: rollout.attempt_id}
    resource = ",".join(f"{key}={quote(value, safe='')}" for key, value in identity.items())
    if env.get("OTEL_RESOURCE_ATTRIBUTES"):
        resource = f"{env['OTEL_RESOURCE_ATTRIBUTES']},{resource}"  # later keys win: ours
    env.update(
        {
            "ANTHROPIC_BASE_URL": model_url.removesuffix("/v1"),
            "ANTHROPIC_API_KEY": api_key,
            "OPENAI_BASE_URL": model_url if model_url.endswith("/v1") else f"{model_url}/v1",
            "OPENAI_API_KEY": api_key,
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint.rstrip("/"),
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_RESOURCE_ATTRIBUTES": resource,
            "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
            "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "IS_SANDBOX": "1",
        }
    )
    if auth_token:
        env["OTEL_EXPORTER_OTLP_HEADERS"] = f"authorization=Bearer%20{quote(auth_token, safe='')}"
    return env


__all__ = ["harness_env", "set_runner_export"]
