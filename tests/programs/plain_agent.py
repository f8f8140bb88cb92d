"""An agent with no lightning_otel import at all: what `lightning-otel-run` must trace unchanged."""

import os
import sys

import openai

client = openai.OpenAI(base_url=os.environ["AGENT_LLM_URL"], api_key="test", max_retries=0)
reply = client.chat.completions.create(model="agl-model", messages=[{"role": "user", "content": "hello"}])
print(reply.choices[0].message.content)
sys.exit(0)
