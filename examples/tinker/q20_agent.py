"""Twenty questions as a CrewAI flow: a player asks yes/no questions (or guesses), an answerer who knows the secret
replies, and an optional mock search tool lets the player look things up. Shared by training and evaluation, and
unaware of both: nothing here imports lightning-otel or Tinker.

    flow = TwentyQuestionsFlow(player_llm=LLM(...), answerer_llm=LLM(...), search_llm=None)
    game = flow.play(answer="penguin", category="animal")      # -> GameResult(guessed, turns, questions)

The player wins when one of its questions names the secret (a whole-word match, so "Is it a penguin?" wins and
"Is it a bird?" does not); the answerer is asked only when it did not. A turn is one crew per agent, so each
player call sees the category and the questions and answers so far.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from crewai import LLM, Agent, Crew, Task
from crewai.flow.flow import Flow, start
from crewai.tools import BaseTool
from pydantic import BaseModel

MAX_TURNS = 20
# CrewAI warns on every call to a model it has no token counter for (any self-hosted one): once is enough.
logging.getLogger("crewai.llms.base_llm").setLevel(logging.ERROR)


class GameState(BaseModel):
    answer: str = ""
    category: str = ""
    max_turns: int = MAX_TURNS
    questions: list[str] = []
    replies: list[str] = []
    guessed: bool = False


@dataclass
class GameResult:
    answer: str
    guessed: bool
    turns: int
    questions: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)


def names_the_secret(question: str, answer: str) -> bool:
    return re.search(rf"\b{re.escape(answer.lower())}s?\b", question.lower()) is not None


class MockSearch(BaseTool):
    """An encyclopedia stand-in: a helper LLM writes the snippet a search would return (no web access needed)."""

    name: str = "search"
    description: str = "Look up a word or a topic; returns a short encyclopedia-style snippet."
    search_llm: Any = None

    def _run(self, query: str) -> str:
        prompt = f"Write two sentences an encyclopedia would say about: {query}"
        return str(self.search_llm.call([{"role": "user", "content": prompt}]))


class TwentyQuestionsFlow(Flow[GameState]):
    suppress_flow_events: bool = True  # no console panels per game
    player_llm: Any = None
    answerer_llm: Any = None
    search_llm: Any = None  # set: the player has the mock search tool

    def play(self, answer: str, category: str, max_turns: int = MAX_TURNS) -> GameResult:
        self.kickoff(inputs={"answer": answer, "category": category, "max_turns": max_turns})
        state = self.state
        return GameResult(state.answer, state.guessed, len(state.questions), list(state.questions), list(state.replies))

    @start()
    def game(self) -> None:
        player = Agent(
            role="player",
            goal="Find the secret noun in as few yes/no questions as possible",
            backstory="You play twenty questions. Ask one yes/no question per turn; guess with 'Is it a <noun>?'.",
            llm=self.player_llm,
            tools=[MockSearch(search_llm=self.search_llm)] if self.search_llm is not None else [],
            max_iter=3,
        )
        answerer = Agent(
            role="answerer",
            goal="Answer yes/no questions about the secret noun truthfully",
            backstory="You know the secret noun of a game of twenty questions. You reply Yes or No, nothing else.",
            llm=self.answerer_llm,
        )
        state = self.state
        for _ in range(state.max_turns):
            question = _run_task(player, _player_task(state))
            state.questions.append(question)
            if names_the_secret(question, state.answer):
                state.guessed = True
                state.replies.append("Correct!")
                return
            description = (
                f"The secret noun is '{state.answer}' (a {state.category}). The player asks: {question}\n"
                "Reply Yes or No."
            )
            state.replies.append(_run_task(answerer, description))


def _player_task(state: GameState) -> str:
    history = "\n".join(f"Q: {q}\nA: {a}" for q, a in zip(state.questions, state.replies, strict=True))
    left = state.max_turns - len(state.questions)
    return (
        f"The secret is a {state.category}. {left} questions left.\n"
        + (f"So far:\n{history}\n" if history else "")
        + "Ask your next yes/no question, or guess with 'Is it a <noun>?'."
    )


def _run_task(agent: Agent, description: str) -> str:
    task = Task(description=description, expected_output="One short sentence.", agent=agent)
    return str(Crew(agents=[agent], tasks=[task], verbose=False).kickoff().raw).strip()


def make_llm(model: str, base_url: str | None, api_key: str | None, **sampling: Any) -> LLM:
    """An OpenAI-compatible model through CrewAI's native provider."""
    return LLM(model=f"openai/{model}", base_url=base_url, api_key=api_key or "unused", **sampling)
