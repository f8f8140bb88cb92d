"""Added time per LLM call: uninstrumented vs lightning-otel vs OpenInference, paired in one process run.

    python -m benchmarks.capture_overhead [--calls 1500] [--prompt-words 120] [--back-to-back]

The OpenAI-compatible test server runs in a child process (vLLM-format token ids from the tiny tokenizer).
Every condition sends the same request body (token-id parameters included), so the server does the same work
and only the instrumentation differs. Spans go to a BatchSpanProcessor whose exporter encodes them to OTLP
protobuf (the encoder lightning-otel's OTLP exporters use).

Default (paced): the conditions take turns call by call, in a rotating order, so machine drift hits them alike;
after each call, untimed, the span finisher and the exporters finish their work, as they do in an agent between
two LLM calls, and the CPU they spent is reported per call ("background CPU"). `--back-to-back`: per round, each
condition makes calls/rounds calls in a row, with export competing for the GIL (a zero-think-time worst case).
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
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import lightning_otel
from lightning_otel.capture.otlp_encoding import encode_request

TOKEN_ID_BODY = {"return_token_ids": True, "logprobs": True, "top_logprobs": 0}


class EncodingExporter(SpanExporter):
    """Pays the real OTLP encoding cost (the encoder lightning-otel's exporters use), then drops the bytes."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.bytes += len(encode_request(spans))
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


Sample = tuple[float, float, float, float]  # wall, caller CPU, caller CPU outside request(), background CPU


def time_call(call: Callable[[], object], settle: Callable[[], None]) -> Sample:
    """One call: wall seconds, the calling thread's CPU seconds, that CPU minus the CPU spent inside openai's
    `request` (our code plus openai's request building), and the CPU spent on it after it returned or on other
    threads (span finishing, export) until `settle` returned. `settle` runs on this thread (a force-flush
    exports here), so everything but the call itself counts as background."""
    _inside_request[0] = 0.0
    process_start, cpu_start, start = time.process_time(), time.thread_time(), time.perf_counter()
    call()
    wall, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
    settle()
    background = max(0.0, time.process_time() - process_start - cpu)
    return wall, cpu, cpu - _inside_request[0], background


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1500, help="calls per condition and call shape")
    parser.add_argument("--rounds", type=int, default=5, help="with --back-to-back: rounds of calls/rounds calls")
    parser.add_argument("--back-to-back", action="store_true", help="calls in a row, export competing")
    parser.add_argument("--prompt-words", type=int, default=120, help="size of the prompt (and of the echo)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: that it runs (the tests run it)")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.prompt_words = 20, 20

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
    provider.add_span_processor(BatchSpanProcessor(exporter))
    lightning_otel.instrument(tracer_provider=provider, instrumentors=["openai"])
    lightning_otel.register_trainable_endpoint(base_url)
    lightning_otel.uninstrument()
    providers = [provider]

    try:
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference

        openinference: OpenInference | None = OpenInference()
        openinference_provider = TracerProvider()
        openinference_provider.add_span_processor(BatchSpanProcessor(EncodingExporter()))
        providers.append(openinference_provider)
    except ImportError:
        openinference = None

    def settle() -> None:
        """What an agent's background threads do between two LLM calls: finish spans, export them."""
        lightning_otel.flush()
        for each in providers:
            each.force_flush()

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
    mode = "back to back" if args.back_to_back else "paced"
    for transport, client in transports.items():
        for shape, call, calls in (
            ("create", create_call(client, messages), args.calls),
            ("stream=True", stream_call(client, messages), max(args.calls // 10, 10)),  # 450 chunks a call
        ):
            for _ in range(20):  # warm up connections and code paths
                call()
            measure = back_to_back if args.back_to_back else paced
            samples = measure(conditions, call, calls, settle, args.rounds)
            report(f"{transport}, {shape}, {mode}", samples, paired=not args.back_to_back)
    print(f"\nexported {exporter.spans} lightning-otel spans ({exporter.bytes / max(exporter.spans, 1):.0f} B each)")
    if not exporter.spans:
        sys.exit("lightning-otel exported no span: the instrumented condition measured nothing")


Conditions = dict[str, tuple[Callable[[], None], Callable[[], None]]]


def paced(
    conditions: Conditions, call: Callable[[], object], calls: int, settle: Callable[[], None], _rounds: int
) -> dict[str, list[Sample]]:
    """Conditions take turns call by call (rotating who goes first); background work settles after each call."""
    names = list(conditions)
    samples: dict[str, list[Sample]] = {name: [] for name in names}
    for index in range(calls):
        first = index % len(names)
        for name in names[first:] + names[:first]:
            enable, disable = conditions[name]
            enable()
            try:
                samples[name].append(time_call(call, settle))
            finally:
                disable()
    return samples


def back_to_back(
    conditions: Conditions, call: Callable[[], object], calls: int, settle: Callable[[], None], rounds: int
) -> dict[str, list[Sample]]:
    """Each condition makes calls/rounds calls in a row per round; background CPU is the round's, per call."""
    samples: dict[str, list[Sample]] = {name: [] for name in conditions}
    per_round = max(calls // rounds, 1)
    for _ in range(rounds):
        for name, (enable, disable) in conditions.items():
            enable()
            try:
                process_start = time.process_time()
                timed = [time_call(call, lambda: None) for _ in range(per_round)]
                settle()
                background = time.process_time() - process_start - sum(sample[1] for sample in timed)
                samples[name] += [(wall, cpu, outside, background / per_round) for wall, cpu, outside, _ in timed]
            finally:
                disable()
    return samples


def report(title: str, samples: dict[str, list[Sample]], paired: bool) -> None:
    """Medians per call: wall time, the calling thread's CPU (the hot path proper), the CPU outside openai's
    `request` (the instrumentation's own work, without the response-parsing noise); mean background CPU.
    Paced runs report "added" as the median of call-by-call differences with the uninstrumented call made
    alongside, which drift between seconds of the run cannot bias."""
    base_values = samples["uninstrumented"]
    print(f"\n{title}: {len(base_values)} calls per condition")
    print(
        f"  {'condition':<16}{'wall med us':>12}{'added us':>10}{'ratio':>8}{'caller CPU us':>15}{'added us':>10}"
        f"{'outside request() us':>22}{'added us':>10}{'background CPU us':>19}"
    )
    base = [statistics.median(sample[i] for sample in base_values) for i in range(3)]
    for name, values in samples.items():
        medians = [statistics.median(sample[i] for sample in values) for i in range(3)]
        if paired:
            pairs = list(zip(values, base_values, strict=True))
            added = [statistics.median(mine[i] - theirs[i] for mine, theirs in pairs) for i in range(3)]
        else:
            added = [medians[i] - base[i] for i in range(3)]
        background = statistics.fmean(sample[3] for sample in values)
        print(
            f"  {name:<16}{medians[0] * 1e6:>12.0f}{added[0] * 1e6:>10.0f}{(base[0] + added[0]) / base[0]:>8.3f}"
            f"{medians[1] * 1e6:>15.0f}{added[1] * 1e6:>10.0f}{medians[2] * 1e6:>22.0f}{added[2] * 1e6:>10.0f}"
            f"{background * 1e6:>19.0f}"
        )


if __name__ == "__main__":
    main()
