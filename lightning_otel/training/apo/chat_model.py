"""The model APO asks for critiques and edits: an `AsyncOpenAI` or `OpenAI` client (any OpenAI-compatible server:
vLLM, Ollama, a hosted API) or LiteLLM model names (`use_litellm=True`: "anthropic/...", "ollama/...")."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Sequence
from typing import Any


class ChatModel:
    """`complete(model, messages, temperature) -> text`, from synchronous code whatever the client is: an async
    client's calls run on one event loop of its own (its connection pool stays on the loop it was made on)."""

    def __init__(self, client: Any = None, *, use_litellm: bool = False) -> None:
        if client is None and not use_litellm:
            raise ValueError("APO needs an OpenAI-compatible client (AsyncOpenAI or OpenAI) or use_litellm=True")
        if use_litellm:
            import litellm  # noqa: F401  # fail now, with the install line below, not at the first critique

        self.client, self.use_litellm = client, use_litellm
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def _run(self, coroutine: Any) -> Any:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="agl-apo-llm", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def complete(self, model: str, messages: Sequence[dict[str, str]], temperature: float) -> str:
        if self.use_litellm:
            import litellm

            response = litellm.completion(model=model, messages=list(messages), temperature=temperature)
        else:
            response = self.client.chat.completions.create(
                model=model, messages=list(messages), temperature=temperature
            )
            if inspect.isawaitable(response):
                response = self._run(response)
        return response.choices[0].message.content or ""

    def close(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop = None
