"""A streamed chat or completions call relayed from the replica to the agent as the replica sends it, each chunk
recorded on the call's span (token ids so far when the client leaves early, marked incomplete)."""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from starlette.responses import Response, StreamingResponse

from lightning_otel.capture.llm_call import LLMCall
from lightning_otel.serving.app_server import openai_error


async def relay_stream(
    client: httpx.AsyncClient, call: LLMCall, url: str, headers: dict[str, str], body: dict[str, Any], *,
    leave: Callable[[], None], served: Callable[[], None],
) -> Response:  # fmt: skip
    """The replica's stream as the agent's response; `served()` and `leave()` when it ends or is dropped unsent
    (`leave` must be callable twice: a `WeightHold.leave_once()`); an error answered whole, `leave` left to the
    caller."""
    try:
        upstream = await client.send(client.build_request("POST", url, json=body, headers=headers), stream=True)
    except httpx.HTTPError as exc:
        call.finish(error=exc)
        return openai_error(502, f"replica {url} unreachable: {exc}")
    if upstream.status_code >= 400:
        content = await upstream.aread()
        await upstream.aclose()
        call.finish(error=RuntimeError(f"replica answered HTTP {upstream.status_code}"))
        return Response(content, upstream.status_code, media_type=upstream.headers.get("content-type"))

    async def relay() -> AsyncIterator[bytes]:
        complete = False
        try:
            async for line in upstream.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    with contextlib.suppress(ValueError):  # not ours to judge: the client gets the bytes as sent
                        call.record_chunk(json.loads(line[6:]))
                complete = complete or line == "data: [DONE]"
                yield (line + "\n").encode()
        finally:
            await upstream.aclose()
            call.finish(stream_complete=complete)  # a client that left early: ids so far, marked incomplete
            served()
            leave()

    response = StreamingResponse(relay(), media_type=upstream.headers.get("content-type", "text/event-stream"))
    weakref.finalize(response, leave)  # never counted in flight forever: a drain would wait out its timeout
    return response


__all__ = ["relay_stream"]
