"""The user installed an SDK provider first: lightning_otel must reuse it and leave its exporter alone."""

import json
import os

import openai
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

provider = TracerProvider()
exporter = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

import lightning_otel  # noqa: E402

state = lightning_otel.instrument(token_ids=True)
client = openai.OpenAI(base_url=os.environ["AGENT_LLM_URL"], api_key="test", max_retries=0)
with lightning_otel.rollout_context("ro-existing", "at-1"), lightning_otel.agent("writer"):
    client.chat.completions.create(model="agl-model", messages=[{"role": "user", "content": "hi"}])
lightning_otel.flush()  # end of the rollout: every span is finished and exported
print(
    json.dumps(
        {
            "same_provider": state.tracer_provider is provider,
            "spans": [
                {
                    "name": s.name,
                    "attributes": {
                        k: (list(v) if isinstance(v, tuple) else v) for k, v in (s.attributes or {}).items()
                    },
                }
                for s in exporter.get_finished_spans()
            ],
        }
    )
)
