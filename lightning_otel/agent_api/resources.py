"""Resources the trainer hands to every rollout: named, versioned, JSON on the wire.

    initial_resources={"main_llm": LLM("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-0.5B-Instruct",
                                       sampling_parameters={"temperature": 1.0})}

    def rollout(task, resources, rollout):
        llm = resources["main_llm"]
        client = OpenAI(base_url=llm.get_base_url(rollout.rollout_id, rollout.attempt_id), api_key=llm.api_key)

`ProxyLLM` is the rollout-aware variant for a gateway that reads the rollout identity from the URL path
(`/rollout/{rollout_id}/attempt/{attempt_id}/v1/...`), for clients that cannot send baggage headers. Values that are
not resources (a plain string, a dict of settings) travel as they are; `PromptTemplate` is a prompt resource.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

_TYPE_KEY = "__resource__"


@dataclass(slots=True)
class LLM:
    """An OpenAI-compatible endpoint serving the policy (`endpoint` is the base URL, usually ending in /v1)."""

    endpoint: str
    model: str
    sampling_parameters: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = "EMPTY"  # None: the client decides (OPENAI_API_KEY), as in Agent Lightning

    def get_base_url(self, rollout_id: str | None = None, attempt_id: str | None = None) -> str:
        """The base URL a client of this rollout should use (the same for every rollout here)."""
        return self.endpoint

    @property
    def base_url(self) -> str:
        return self.endpoint


@dataclass(slots=True)
class ProxyLLM(LLM):
    """An LLM behind the policy gateway: `get_base_url` puts the rollout identity into the path."""

    def get_base_url(self, rollout_id: str | None = None, attempt_id: str | None = None) -> str:
        if not rollout_id:
            return self.endpoint
        path = f"/rollout/{quote(rollout_id, safe='')}/attempt/{quote(attempt_id or '', safe='')}"
        return f"{self.root}{path}/v1"

    @property
    def root(self) -> str:
        """The gateway server's root: the rollout paths hang under it, beside its `/v1`."""
        return self.endpoint.rstrip("/").removesuffix("/v1")


@dataclass(slots=True)
class PromptTemplate:
    """A prompt the algorithm may change between versions (Agent Lightning's resource); `engine` "f-string"."""

    template: str
    engine: str = "f-string"

    def format(self, **values: Any) -> str:
        if self.engine != "f-string":
            raise ValueError(f"prompt template engine {self.engine!r} is not supported here: use 'f-string'")
        return self.template.format(**values)


RESOURCE_TYPES: dict[str, type[Any]] = {"llm": LLM, "proxy_llm": ProxyLLM, "prompt_template": PromptTemplate}
_NAMES = {cls: name for name, cls in RESOURCE_TYPES.items()}


def resources_to_json(resources: dict[str, Any]) -> dict[str, Any]:
    """Resources to their JSON form (what the collector stores and runners receive)."""
    encoded: dict[str, Any] = {}
    for name, value in resources.items():
        kind = _NAMES.get(type(value))
        encoded[name] = {_TYPE_KEY: kind, **asdict(value)} if kind else value
    return encoded


def resources_from_json(encoded: dict[str, Any]) -> dict[str, Any]:
    decoded: dict[str, Any] = {}
    for name, value in encoded.items():
        if isinstance(value, dict) and value.get(_TYPE_KEY) in RESOURCE_TYPES:
            fields = {key: item for key, item in value.items() if key != _TYPE_KEY}
            decoded[name] = RESOURCE_TYPES[value[_TYPE_KEY]](**fields)
        else:
            decoded[name] = value
    return decoded


def llm_endpoints(resources: dict[str, Any]) -> list[str]:
    """Base URLs of the LLM resources: the runner asks these for token ids. A ProxyLLM's is its server's root: the
    rollout paths its `get_base_url` builds hang under it, not under its `/v1`."""
    return [
        value.root if isinstance(value, ProxyLLM) else value.endpoint
        for value in resources.values()
        if isinstance(value, LLM)
    ]
