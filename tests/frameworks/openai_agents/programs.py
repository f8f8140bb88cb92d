"""Two multi-agent programs written the way the OpenAI Agents SDK docs teach: a triage agent that hands off to a
specialist with a function tool, and a manager that calls other agents as tools. Each takes the model client and
returns the final output; the scripted server replies that drive them are next to each program."""

from __future__ import annotations

from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool
from openai import AsyncOpenAI

from lightning_otel.testing import Reply, ToolCall


def model(client: AsyncOpenAI, api: str) -> OpenAIChatCompletionsModel | OpenAIResponsesModel:
    if api == "responses":
        return OpenAIResponsesModel(model="agl-tiny", openai_client=client)
    return OpenAIChatCompletionsModel(model="agl-tiny", openai_client=client)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


TRIAGE_REPLIES = [
    Reply(tool_calls=[ToolCall("transfer_to_weather", "{}")]),
    Reply(tool_calls=[ToolCall("get_weather", '{"city": "Paris"}')]),
    "It is sunny in Paris.",
]


def triage_agents(client: AsyncOpenAI, api: str = "chat_completions") -> Agent:
    weather = Agent(
        name="weather",
        instructions="Answer weather questions with the get_weather tool.",
        tools=[get_weather],
        model=model(client, api),
    )
    return Agent(
        name="triage",
        instructions="Hand weather questions to the weather agent.",
        handoffs=[weather],
        model=model(client, api),
    )


async def run_triage(client: AsyncOpenAI, *, streamed: bool = False, api: str = "chat_completions") -> str:
    triage = triage_agents(client, api)
    if not streamed:
        result = await Runner.run(triage, "What is the weather in Paris?")
        return str(result.final_output)
    stream = Runner.run_streamed(triage, "What is the weather in Paris?")
    async for _ in stream.stream_events():
        pass
    return str(stream.final_output)


MANAGER_REPLIES = [
    Reply(tool_calls=[ToolCall("translate_to_spanish", '{"input": "good morning"}')]),
    "buenos dias",
    "In Spanish: buenos dias",
]


async def run_manager(client: AsyncOpenAI) -> str:
    spanish = Agent(name="spanish", instructions="Translate the input to Spanish.", model=model(client, "chat"))
    manager = Agent(
        name="manager",
        instructions="Use your tools to translate.",
        tools=[spanish.as_tool(tool_name="translate_to_spanish", tool_description="Translate to Spanish")],
        model=model(client, "chat"),
    )
    result = await Runner.run(manager, "Say good morning in Spanish.")
    return str(result.final_output)
