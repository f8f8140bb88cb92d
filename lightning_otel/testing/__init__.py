"""Test support that ships with the package, for our tests and for users testing their own agents (a public face:
examples import only from here, `lightning_otel` and `lightning_otel.collector`).

- `OpenAITestServer`: an OpenAI-compatible HTTP server on loopback returning vLLM-format token ids and logprobs
  from a real (tiny, offline) tokenizer; replies are scripted (`Reply`, `ToolCall`) or echo-like.
- `SpanCapture`: an in-memory span processor with helpers to find LLM, agent and reward spans.
- `build_tokenizer` / `train_tokenizer`: a tiny BPE tokenizer with a ChatML template, built offline (the second
  trained on your own prompts); `ChatTokenizer` wraps one.
- `save_tiny_model(path, ...)`: a tiny random Qwen2 (or Llama) with that tokenizer, saved as a Hugging Face model
  folder any trainer here loads (needs torch and transformers, imported on first use); `model_or_tiny(model,
  workdir, seed=...)`: a named model's or a folder's path, or for "tiny" such a model built there once.
- `serve_folder(folder)`: a Hugging Face model folder served on loopback as vLLM serves it (a CPU replica: its chat
  template, token ids, the hermes tool parser), for a dry run or an evaluation against a real model (torch).
- `FaultProxy`: an HTTP proxy in front of a policy (each call goes where its `x-chaos-upstream` header says) that
  answers 503, hangs, or cuts the connection halfway through an answer when told: an agent's retries and a
  training's handling of them, tested (`benchmarks.chaos` drives it).
- pytest fixtures `openai_test_server` and `agl_spans` (plugin registered automatically).
"""

from typing import Any

from lightning_otel.testing.replies import Reply, ToolCall
from lightning_otel.testing.server import OpenAITestServer
from lightning_otel.testing.span_capture import SpanCapture
from lightning_otel.testing.tokenizer import ChatTokenizer, build_tokenizer, train_tokenizer

__all__ = [
    "ChatTokenizer",
    "FaultProxy",
    "OpenAITestServer",
    "Reply",
    "SpanCapture",
    "ToolCall",
    "build_tokenizer",
    "model_or_tiny",
    "save_tiny_model",
    "serve_folder",
    "train_tokenizer",
]


def __getattr__(name: str) -> Any:
    if name in ("save_tiny_model", "model_or_tiny"):  # torch and transformers: loaded when a model is built
        from lightning_otel.testing import tiny_model

        return getattr(tiny_model, name)
    if name == "FaultProxy":  # uvicorn: loaded when a proxy is made
        from lightning_otel.testing.fault_proxy import FaultProxy

        return FaultProxy
    if name == "serve_folder":  # torch too
        from lightning_otel.serving.cpu_replica import serve_folder

        return serve_folder
    raise AttributeError(f"module 'lightning_otel.testing' has no attribute {name!r}")
