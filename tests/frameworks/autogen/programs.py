"""Two AutoGen agentchat teams written the way its docs teach: a round-robin writer/critic team that stops on
APPROVE, and a Swarm whose triage agent hands off to a weather agent with a tool."""

from __future__ import annotations

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import HandoffTermination, MaxMessageTermination, TextMentionTermination
from autogen_agentchat.teams import RoundRobinGroupChat, Swarm
from autogen_ext.models.openai import OpenAIChatCompletionClient

from lightning_otel.testing import Reply, ToolCall


def model_client(base_url: str) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(
        model="agl-tiny",
        base_url=base_url,
        api_key="test",
        max_retries=0,
        model_info={"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                    "structured_output": False},
    )  # fmt: skip


REVIEW_REPLIES = ["SELECT * FROM orders;", "Add a year filter.", "SELECT * FROM orders WHERE year = 2024;", "APPROVE"]


async def run_review(base_url: str) -> list[str]:
    client = model_client(base_url)
    writer = AssistantAgent("writer", model_client=client, system_message="Write SQL.")
    critic = AssistantAgent("critic", model_client=client, system_message="Review SQL; say APPROVE when right.")
    team = RoundRobinGroupChat(
        [writer, critic], termination_condition=TextMentionTermination("APPROVE") | MaxMessageTermination(8)
    )
    result = await team.run(task="Orders of 2024")
    return [str(message.content) for message in result.messages]


async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


SWARM_REPLIES = [
    Reply(tool_calls=[ToolCall("transfer_to_weather", "{}")]),
    Reply(tool_calls=[ToolCall("get_weather", '{"city": "Paris"}')]),
    "It is sunny in Paris. TERMINATE",
]


async def run_swarm(base_url: str) -> str:
    client = model_client(base_url)
    triage = AssistantAgent(
        "triage", model_client=client, handoffs=["weather"], system_message="Hand weather questions to weather."
    )
    weather = AssistantAgent(
        "weather", model_client=client, tools=[get_weather], reflect_on_tool_use=True, system_message="Answer."
    )
    team = Swarm(
        [triage, weather],
        termination_condition=TextMentionTermination("TERMINATE")
        | HandoffTermination("user")
        | MaxMessageTermination(10),
    )
    result = await team.run(task="What is the weather in Paris?")
    return str(result.messages[-1].content)
