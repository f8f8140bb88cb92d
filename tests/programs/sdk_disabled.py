"""With OTEL_SDK_DISABLED=true nothing is patched and the agent runs as before."""

import json
import os

import openai
from openai._base_client import SyncAPIClient

import lightning_otel.auto  # noqa: F401

client = openai.OpenAI(base_url=os.environ["AGENT_LLM_URL"], api_key="test", max_retries=0)
reply = client.chat.completions.create(model="agl-model", messages=[{"role": "user", "content": "hi"}])
print(
    json.dumps(
        {
            "patched": hasattr(SyncAPIClient.request, "__wrapped__"),
            "content": reply.choices[0].message.content,
        }
    )
)
