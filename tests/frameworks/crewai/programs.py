"""Two CrewAI crews written the way its docs teach: a researcher and a writer working two sequential tasks, and an
analyst using a tool (CrewAI's native tool calling through the OpenAI-compatible provider)."""

from __future__ import annotations

from crewai import LLM, Agent, Crew, Process, Task
from crewai.tools import tool

from lightning_otel.testing import Reply, ToolCall


def llm(base_url: str, *, litellm: bool = False) -> LLM:
    """CrewAI's native OpenAI-compatible provider, or (`litellm=True`) its LiteLLM path."""
    return LLM(model="openai/agl-tiny", base_url=base_url, api_key="test", is_litellm=litellm)


REPORT_REPLIES = [
    "Thought: I now know the final answer\nFinal Answer: Orders grew 20% in 2024.",
    "Thought: I now know the final answer\nFinal Answer: Report: orders grew 20% in 2024.",
]


def run_report(base_url: str, *, litellm: bool = False) -> str:
    model = llm(base_url, litellm=litellm)
    researcher = Agent(role="researcher", goal="Find facts about orders", backstory="An analyst.", llm=model)
    writer = Agent(role="writer", goal="Write a one-line report", backstory="A writer.", llm=model)
    research = Task(description="Research orders in 2024.", expected_output="One fact.", agent=researcher)
    report = Task(description="Write the report.", expected_output="One line.", agent=writer, context=[research])
    crew = Crew(agents=[researcher, writer], tasks=[research, report], process=Process.sequential)
    return str(crew.kickoff().raw)


@tool("get_weather")
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


WEATHER_REPLIES = [
    Reply(tool_calls=[ToolCall("get_weather", '{"city": "Paris"}')]),  # CrewAI uses native tool calling here
    "It is sunny in Paris.",
]


def run_weather(base_url: str) -> str:
    analyst = Agent(
        role="analyst", goal="Answer weather questions", backstory="Uses tools.", tools=[get_weather], llm=llm(base_url)
    )
    task = Task(description="What is the weather in Paris?", expected_output="One sentence.", agent=analyst)
    return str(Crew(agents=[analyst], tasks=[task]).kickoff().raw)
