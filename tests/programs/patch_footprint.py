"""Prints what `instrument()` + real calls + `uninstrument()` left changed in other libraries: every module-level and
class-level attribute of openai, anthropic, litellm, httpx, requests and OpenTelemetry (SDK, API, exporters),
compared by identity with a snapshot taken before `instrument()`. One line per difference; nothing when all is
restored."""

from __future__ import annotations

import importlib.util
import inspect
import sys

import httpx
import openai
import requests
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc import trace_exporter as grpc_exporter  # noqa: F401 - snapshot it
from opentelemetry.exporter.otlp.proto.http import trace_exporter as http_exporter  # noqa: F401 - snapshot it
from opentelemetry.sdk.trace import TracerProvider

# LiteLLM pins openai < 3: the openai3 lane runs without it
litellm = __import__("litellm") if importlib.util.find_spec("litellm") else None
anthropic = __import__("anthropic") if importlib.util.find_spec("anthropic") else None
PREFIXES = ("openai", "anthropic", "litellm", "httpx", "requests", "opentelemetry")


def snapshot() -> dict[tuple[str, str], int]:
    seen: dict[tuple[str, str], int] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(PREFIXES):
            continue
        for attribute, value in list(vars(module).items()):
            seen[(name, attribute)] = id(value)
            if inspect.isclass(value) and getattr(value, "__module__", "") == name:
                for member, member_value in list(vars(value).items()):
                    seen[(f"{name}.{attribute}", member)] = id(member_value)
    return seen


def exercise(base_url: str, messages_url: str) -> None:
    """The calls an agent makes: chat (plain and streamed), Anthropic's messages (plain and streamed, through the
    policy gateway, which speaks them), LiteLLM, httpx, requests."""
    client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    for _ in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True):
        pass
    if anthropic is not None:
        claude = anthropic.Anthropic(base_url=messages_url, api_key="k", max_retries=0)
        claude.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}])
        with claude.messages.stream(model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}]) as stream:
            "".join(stream.text_stream)
    if litellm is not None:
        messages = [{"role": "user", "content": "x"}]
        litellm.completion(model="openai/m", api_base=base_url, api_key="k", messages=messages)
    httpx.get(f"{base_url}/models")
    requests.get(f"{base_url}/models", timeout=10)


from lightning_otel.serving.gateway import GatewayServer, PolicyGateway  # noqa: E402 - serves Anthropic's messages
from lightning_otel.testing import OpenAITestServer  # noqa: E402 - the test server: not lightning_otel's capture

trace.set_tracer_provider(TracerProvider())  # the user's own provider: ours is added to it through its public API
with (
    OpenAITestServer(lambda body: "hi") as server,
    GatewayServer(PolicyGateway([server.base_url], tracer=trace.get_tracer("gateway"))) as gateway,
):
    messages_url = gateway.base_url.removesuffix("/v1")
    exercise(server.base_url, messages_url)  # the libraries' own lazy state (pydantic schemas, caches) settles first
    before = snapshot()

    import lightning_otel

    lightning_otel.instrument(token_ids=True)
    exercise(server.base_url, messages_url)
    lightning_otel.flush()
    lightning_otel.uninstrument()
    after = snapshot()

for key, identity in sorted(before.items()):
    # pydantic builds a model's schema on its first validation: the token-id responses hold models (logprobs) that
    # the plain calls above never parsed
    if after.get(key) != identity and not key[1].startswith("__pydantic_"):
        print(f"{key[0]}.{key[1]}")
