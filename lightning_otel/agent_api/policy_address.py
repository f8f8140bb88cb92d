"""The policy's address for agent services that start on their own (verl's `LLM_SERVER_NOTIFY_FILE`).

The trainer writes the file each time it publishes resources (`Trainer(settings=RunSettings(policy_notify_file=...))`,
default the `LLM_SERVER_NOTIFY_FILE` environment variable), atomically, as JSON:

    {"address": "127.0.0.1:41234", "base_url": "http://127.0.0.1:41234/v1", "model": "...", "api_key": "EMPTY",
     "sampling_parameters": {...}, "version": 3, "resource": "main_llm"}

A service reads it when a request comes (it may change between versions):

    import lightning_otel as agl
    base_url = f"http://{agl.get_llm_server_address()}/v1"     # the recipe's spelling
    policy = agl.read_policy_address(wait_s=60)                  # the whole record, waiting for the trainer

A service that cannot share a file polls the collector instead: `GET /v1/resources/latest` holds the same resource.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lightning_otel.agent_api.resources import LLM, ProxyLLM

NOTIFY_FILE_ENV = "LLM_SERVER_NOTIFY_FILE"


class PolicyAddressUnavailable(RuntimeError):
    """No policy address was published (no notify file, or not yet written)."""


def notify_file_from_env(path: str | os.PathLike[str] | None) -> Path | None:
    value = path if path is not None else os.environ.get(NOTIFY_FILE_ENV)
    return Path(value) if value else None


def policy_record(resources: dict[str, Any], version: int, resource: str = "main_llm") -> dict[str, Any] | None:
    """The notify file's content for published `resources`; None when they hold no LLM named `resource`."""
    llm = resources.get(resource)
    if not isinstance(llm, LLM):
        return None
    root = llm.root if isinstance(llm, ProxyLLM) else llm.endpoint.rstrip("/").removesuffix("/v1")
    return {
        "address": urlsplit(root).netloc,
        "base_url": f"{root}/v1",
        "model": llm.model,
        "api_key": llm.api_key,
        "sampling_parameters": dict(llm.sampling_parameters),
        "version": version,
        "resource": resource,
    }


def write_policy_address(path: Path, resources: dict[str, Any], version: int) -> bool:
    """Write the notify file for `resources` (atomically: readers never see half a file); False when there is no
    policy LLM to announce."""
    record = policy_record(resources, version)
    if record is None:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(partial, path)
    return True


def read_policy_address(path: str | os.PathLike[str] | None = None, *, wait_s: float = 0.0) -> dict[str, Any]:
    """The policy record the trainer wrote (to `path`, default `$LLM_SERVER_NOTIFY_FILE`), waiting up to `wait_s`
    for the file to appear. Raises `PolicyAddressUnavailable` with what is missing."""
    file = notify_file_from_env(path)
    if file is None:
        raise PolicyAddressUnavailable(f"no notify file: pass a path or set {NOTIFY_FILE_ENV}")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return json.loads(file.read_text())
        except FileNotFoundError:
            if time.monotonic() >= deadline:
                raise PolicyAddressUnavailable(
                    f"{file} does not exist: the trainer writes it when it publishes the policy "
                    "(Trainer(settings=RunSettings(policy_notify_file=...)) or LLM_SERVER_NOTIFY_FILE in the trainer's "
                    "environment)"
                ) from None
        time.sleep(0.2)  # a file has no change signal that works everywhere; services read it rarely


def get_llm_server_address(path: str | os.PathLike[str] | None = None, *, wait_s: float = 0.0) -> str:
    """`host:port` of the policy's server, as verl's agent_lightning_like recipe's `get_llm_server_address`."""
    return str(read_policy_address(path, wait_s=wait_s)["address"])
