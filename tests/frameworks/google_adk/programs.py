"""Two Google ADK programs written the way its docs teach, on an OpenAI-compatible endpoint through LiteLLM: a
coordinator that transfers to a weather sub-agent with a tool, and a sequential writer -> checker pipeline."""

from __future__ import annotations

from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.genai import types

from lightning_otel.testing import Reply, ToolCall


def model(base_url: str) -> LiteLlm:
    return LiteLlm(model="openai/agl-tiny", api_base=base_url, api_key="test")


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def run(agent: object, text: str) -> list[str]:
    """Run an agent to completion; the texts of its final responses."""
    runner = InMemoryRunner(agent=agent, app_name="agl-tests")  # type: ignore[arg-type]
    session = await runner.session_service.create_session(app_name="agl-tests", user_id="user")
    message = types.Content(role="user", parts=[types.Part(text=text)])
    texts = []
    async for event in runner.run_async(user_id="user", session_id=session.id, new_message=message):
        if event.is_final_response() and event.content and event.content.parts:
            texts.extend(part.text for part in event.content.parts if part.text)
    return texts


COORDINATOR_REPLIES = [
    Reply(tool_calls=[ToolCall("transfer_to_agent", '{"agent_name": "weather"}')]),
    Reply(tool_calls=[ToolCall("get_weather", '{"city": "Paris"}')]),
    "It is sunny in Paris.",
]


async def run_coordinator(base_url: str) -> list[str]:
    weather = LlmAgent(
        name="weather", model=model(base_url), instruction="Answer with the get_weather tool.", tools=[get_weather]
    )
    coordinator = LlmAgent(
        name="coordinator",
        model=model(base_url),
        instruction="Transfer weather questions to the weather agent.",
        sub_agents=[weather],
    )
    return await run(coordinator, "What is the weather in Paris?")


PIPELINE_REPLIES = ["SELECT * FROM orders;", "Looks right."]


async def run_pipeline(base_url: str) -> list[str]:
    writer = LlmAgent(name="writer", model=model(base_url), instruction="Write SQL.", output_key="query")
    checker = LlmAgent(name="checker", model=model(base_url), instruction="Check the query: {query}")
    return await run(SequentialAgent(name="pipeline", sub_agents=[writer, checker]), "Orders of 2024")
