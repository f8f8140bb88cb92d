"""OpenAI client instrumentation: exactly one LLM span per HTTP request to a model.

Usage:

    from lightning_otel.instrumentors.openai import OpenAIInstrumentor
    OpenAIInstrumentor().instrument()          # or `import lightning_otel.auto`

Hook: `SyncAPIClient.request` / `AsyncAPIClient.request` (openai 2.x and 3.x), which every call shape goes
through: `create`, `.parse()`, `.with_raw_response`, `.with_streaming_response`, `stream=True`, `responses.create`,
`client.post`. Spans: `chat {model}` / `text_completion {model}` with the GenAI attributes, the token ids and
logprobs vLLM returned, and `agl.llm.token_ids_complete`.

Agent name: resolved when the span starts (`lightning_otel.agent`, framework sources, nearest agent ancestor).

Configuration:
- `AGL_TOKEN_IDS=1` / `AGL_TOKEN_ID_ENDPOINTS=<regex>`: ask these endpoints for token ids (vLLM >= 0.10.2).
- `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`: record message content (off by default).
"""

from __future__ import annotations

from lightning_otel.instrumentors.stainless_wrappers import StainlessClientInstrumentor


class OpenAIInstrumentor(StainlessClientInstrumentor):
    """Traces every LLM request made with `openai.OpenAI` / `openai.AsyncOpenAI` (and clients built on them)."""

    sdk = "openai"
    instruments = ("openai >= 2.0, < 4",)
