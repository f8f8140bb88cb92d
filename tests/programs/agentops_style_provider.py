"""Another library installed its tracer provider before us, the way agentops does: its own SDK `TracerProvider` with
its own OTLP exporter (to THEIR_ENDPOINT), set globally. Then the agent imports `lightning_otel.auto`."""

import os

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

theirs = TracerProvider()
theirs.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=os.environ["THEIR_ENDPOINT"])))
trace.set_tracer_provider(theirs)

import openai  # noqa: E402

import lightning_otel  # noqa: E402
import lightning_otel.auto  # noqa: E402

client = openai.OpenAI(base_url=os.environ["AGENT_LLM_URL"], api_key="test", max_retries=0)
with lightning_otel.rollout_context("ro-agentops", "at-1"):
    client.chat.completions.create(model="agl-model", messages=[{"role": "user", "content": "hi"}])
lightning_otel.flush()
theirs.force_flush()
