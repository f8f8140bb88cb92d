"""Added time per LLM call: uninstrumented vs lightning-otel vs OpenInference, paired in one process run.

    python benchmarks/capture_overhead.py [--calls 300] [--rounds 5] [--prompt-words 120]

The OpenAI-compatible test server runs in a child process (vLLM-format token ids from the tiny tokenizer).
Conditions alternate in rounds so drift hits them alike; every condition sends the same request body
(token-id parameters included), so the server does the same work and only the instrumentation differs.
Spans go to a BatchSpanProcessor whose exporter encodes them to OTLP protobuf: export runs off the hot path
but still competes for the GIL, as it would in an agent.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

os.environ.setdefault("OTEL_TRACES_EXPORTER", "none")

import httpx
import openai
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import lightning_otel

TOKEN_ID_BODY = {"return_token_ids": True, "logprobs": True, "top_logprobs": 0}


class EncodingExporter(SpanExporter):
    """Pays the real OTLP encoding cost, then drops the bytes."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.bytes += len(encode_spans(spans).SerializeToString())
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "lightning_otel.testing", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if "test server" not in line:
        raise RuntimeError(f"test server did not start: {line!r}")
    return process, f"http://127.0.0.1:{port}/v1"


def create_call(client: openai.OpenAI, messages: list[dict]) -> Callable[[], object]:
    return lambda: client.chat.completions.create(model="agl-tiny", messages=messages, extra_body=TOKEN_ID_BODY)


def stream_call(client: openai.OpenAI, messages: list[dict]) -> Callable[[], object]:
    return lambda: sum(
        1
        for _ in client.chat.completions.create(
            model="agl-tiny", messages=messages, extra_body=TOKEN_ID_BODY, stream=True
        )
    )


# CPU seconds the caller's thread spent inside openai's own `SyncAPIClient.request` during the current call. The
# instrumentation wraps around that method, so (call CPU - inside CPU) isolates what runs around it: openai's
# request building plus, when instrumented, our code. The response parsing inside `request` (milliseconds, and
# noisy) drops out, which makes the added cost measurable to a few microseconds.
_inside_request = [0.0]


def install_request_timer() -> None:
    from openai._base_client import SyncAPIClient

    original = SyncAPIClient.request

    def timed_request(self: object, *args: object, **kwargs: object) -> object:
        started = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            _inside_request[0] += time.thread_time() - started

    SyncAPIClient.request = timed_request  # type: ignore[method-assign]


def time_calls(call: Callable[[], object], count: int) -> list[tuple[float, float, float]]:
    """Per call: wall seconds, calling-thread CPU seconds (excludes background threads), and that CPU minus the
    CPU spent inside openai's `request` (our code plus openai's request building)."""
    samples = []
    for _ in range(count):
        _inside_request[0] = 0.0
        start, cpu_start = time.perf_counter(), time.thread_time()
        call()
        cpu = time.thread_time() - cpu_start
        samples.append((time.perf_counter() - start, cpu, cpu - _inside_request[0]))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per condition per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt-words", type=int, default=120, help="size of the prompt (and of the echo)")
    parser.add_argument(
        "--hot-path-only",
        action="store_true",
        help="drop span finishing and export: measure only the work done on the caller's thread",
    )
    args = parser.parse_args()

    server, base_url = start_server()
    try:
        run(args, base_url)
    finally:
        server.terminate()
        server.wait(10)


def run(args: argparse.Namespace, base_url: str) -> None:
    install_request_timer()  # before instrumenting, so our wrapper wraps the timer
    exporter = EncodingExporter()
    provider = TracerProvider()
    if args.hot_path_only:
        from lightning_otel.span_finisher import finisher

        finisher.submit = lambda job: None  # type: ignore[method-assign]  # spans are never ended or exported
    else:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    lightning_otel.instrument(tracer_provider=provider, instrumentors=["openai"])
    lightning_otel.register_trainable_endpoint(base_url)
    lightning_otel.uninstrument()

    try:
        if args.hot_path_only:
            raise ImportError("the hot-path mode measures lightning-otel alone")
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference

        openinference: OpenInference | None = OpenInference()
        openinference_provider = TracerProvider()
        openinference_provider.add_span_processor(BatchSpanProcessor(EncodingExporter()))
    except ImportError:
        openinference = None

    words = " ".join(f"word{i % 50}" for i in range(args.prompt_words))
    messages = [{"role": "system", "content": "Echo the user."}, {"role": "user", "content": words}]
    body = {"model": "agl-tiny", "messages": messages, **TOKEN_ID_BODY}
    # The server's real replies, replayed from memory: the instrumentation cost without network noise.
    canned = {
        False: httpx.post(f"{base_url}/chat/completions", json=body).content,
        True: httpx.post(f"{base_url}/chat/completions", json={**body, "stream": True}).content,
    }

    def replay(request: httpx.Request) -> httpx.Response:
        streaming = b'"stream":true' in request.content.replace(b" ", b"")
        kind = "text/event-stream" if streaming else "application/json"
        return httpx.Response(200, content=canned[streaming], headers={"content-type": kind})

    transports = {
        "in-memory replay": openai.OpenAI(
            base_url=base_url,
            api_key="bench",
            max_retries=0,
            http_client=httpx.Client(transport=httpx.MockTransport(replay)),
        ),
        "loopback server": openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0),
    }

    conditions: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {
        "uninstrumented": (lambda: None, lambda: None),
        "lightning-otel": (
            lambda: lightning_otel.instrument(tracer_provider=provider, instrumentors=["openai"]),
            lightning_otel.uninstrument,
        ),
    }
    if openinference is not None:

        def disable_openinference() -> None:
            # OpenInference's uninstrument() leaves `request` set on openai.OpenAI itself, which would shadow
            # the base-class method we patch in every later round: restore plain inheritance.
            openinference.uninstrument()
            for cls in (openai.OpenAI, openai.AsyncOpenAI):
                if "request" in vars(cls):
                    delattr(cls, "request")

        conditions["openinference"] = (
            lambda: openinference.instrument(tracer_provider=openinference_provider),
            disable_openinference,
        )

    lightning_otel.rollout_context("bench-rollout", "attempt-1").__enter__()  # spans carry rollout ids
    for transport, client in transports.items():
        for shape, call in (
            ("create", create_call(client, messages)),
            ("stream", stream_call(client, messages)),
        ):
            for _ in range(20):  # warm up connections and code paths
                call()
            samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in conditions}
            for _ in range(args.rounds):
                for name, (enable, disable) in conditions.items():
                    enable()
                    try:
                        samples[name] += time_calls(call, args.calls)
                    finally:
                        disable()
            report(f"{transport}, {shape}", samples)
        provider.force_flush()
        print(f"  lightning-otel spans exported so far: {exporter.spans}")
    provider.force_flush()
    print(f"\nexported {exporter.spans} lightning-otel spans ({exporter.bytes / max(exporter.spans, 1):.0f} B each)")


def report(title: str, samples: dict[str, list[tuple[float, float, float]]]) -> None:
    """Median wall time per call, the calling thread's median CPU time (the hot path proper), and the CPU outside
    openai's `request` (the instrumentation's own work, without the parse noise)."""
    base = [statistics.median(sample[i] for sample in samples["uninstrumented"]) for i in range(3)]
    print(f"\n{title}: {len(samples['uninstrumented'])} calls per condition")
    print(
        f"  {'condition':<16}{'wall med us':>12}{'added us':>10}{'ratio':>8}{'caller CPU us':>15}{'added us':>10}"
        f"{'outside request() us':>22}{'added us':>10}"
    )
    for name, values in samples.items():
        wall, cpu, outside = (statistics.median(sample[i] for sample in values) for i in range(3))
        print(
            f"  {name:<16}{wall * 1e6:>12.0f}{(wall - base[0]) * 1e6:>10.0f}{wall / base[0]:>8.3f}"
            f"{cpu * 1e6:>15.0f}{(cpu - base[1]) * 1e6:>10.0f}{outside * 1e6:>22.0f}{(outside - base[2]) * 1e6:>10.0f}"
        )


if __name__ == "__main__":
    main()
