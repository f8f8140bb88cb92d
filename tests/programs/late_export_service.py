"""An agent service whose spans reach the collector seconds after it answered: run with `lightning-otel-run` and
the SDK's default export delay (5 s), it names its agent with `lightning_otel.agent` and calls the policy twice."""

import os

import openai
from fastapi import FastAPI

import lightning_otel

app = FastAPI()


@app.get("/healthz")
def healthz() -> dict[str, int]:
    return {"pid": os.getpid()}  # the test checks it answers, not another server left on a reused port


@app.post("/chat")
def chat(body: dict) -> dict[str, float]:
    llm = body["llm"]
    client = openai.OpenAI(base_url=llm["base_url"], api_key=llm["api_key"] or "none", max_retries=0)
    with lightning_otel.agent("solver"):
        for turn in range(2):
            messages = [{"role": "user", "content": f"{body['task']['question']} {turn}"}]
            client.chat.completions.create(model=llm["model"], messages=messages)
    return {"reward": 1.0}
