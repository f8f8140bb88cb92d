"""Test support that ships with the package, for our tests and for users testing their own agents.

- `OpenAITestServer`: an OpenAI-compatible HTTP server on loopback returning vLLM-format token ids and logprobs
  from a real (tiny, offline) tokenizer; replies are scripted or echo-like.
- `SpanCapture`: an in-memory span processor with helpers to find LLM, agent and reward spans.
- pytest fixtures `openai_test_server` and `agl_spans` (plugin registered automatically).
"""

from lightning_otel.testing.server import OpenAITestServer, Reply, ToolCall
from lightning_otel.testing.span_capture import SpanCapture
from lightning_otel.testing.tokenizer import ChatTokenizer, build_tokenizer

__all__ = ["ChatTokenizer", "OpenAITestServer", "Reply", "SpanCapture", "ToolCall", "build_tokenizer"]
