"""The reward-model service's request bodies, declared (read by the collector's one rule, `declared_bodies`): what
each route takes, and the words a 400 says when a body is not that."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, field_validator, model_validator

from lightning_otel.collector.declared_bodies import Body, holding, said

MAX_INPUTS = 256
CHAT_MESSAGE = '{"role", "content"}'


class Message(Body):
    role: str
    content: str

    @model_validator(mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        if not isinstance(value, dict) or not isinstance(value.get("role"), str):
            raise said('a message needs a string "role"')
        if not isinstance(value.get("content"), str):
            raise said(f'message of role {value["role"]!r} needs a string "content"')
        return value


def _conversation(messages: list[Message]) -> list[Message]:
    if not messages:
        raise said(f'"messages" must be a non-empty list of {CHAT_MESSAGE} objects')
    return messages


Conversation = Annotated[list[Message], AfterValidator(_conversation), Field(validate_default=True)]


class ScoreInput(Body):
    id: Any = None
    messages: Conversation = []

    @model_validator(mode="after")
    def _answered(self) -> ScoreInput:
        if self.messages[-1].role != "assistant":
            raise said("the last message must be the assistant's answer to score")
        return self


class ScoreBody(Body):
    """POST /score: conversations whose last message is the answer to score."""

    model: str | None = None
    inputs: Annotated[
        list[ScoreInput], holding(1, MAX_INPUTS, '{"id"?, "messages"} objects'), Field(validate_default=True)
    ] = []


class ScorePairBody(Body):
    """POST /score-pair: one conversation, two answers (text or an assistant message)."""

    model: str | None = None
    messages: Conversation = []
    chosen: Message | None = None
    rejected: Message | None = None

    @field_validator("chosen", "rejected", mode="before")
    @classmethod
    def _answer(cls, value: Any, info: Any) -> Any:
        if isinstance(value, str):
            return {"role": "assistant", "content": value}
        if isinstance(value, dict) and isinstance(value.get("content"), str):
            return {"role": str(value.get("role", "assistant")), "content": value["content"]}
        raise said(f'"{info.field_name}" must be the answer text or an {{"role": "assistant", "content"}} message')

    @model_validator(mode="after")
    def _both(self) -> ScorePairBody:
        for name in ("chosen", "rejected"):
            if getattr(self, name) is None:
                raise said(f'"{name}" must be the answer text or an {{"role": "assistant", "content"}} message')
        return self


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_id(x) for x in value)


class ClassifyBody(Body):
    """POST /classify (vLLM's, as verl's reward loop calls it): texts, or token id lists."""

    model: str | None = None
    input: Any = None
    use_activation: bool = True

    @field_validator("input", mode="before")
    @classmethod
    def _input(cls, given: Any) -> Any:
        if isinstance(given, str) or (isinstance(given, list) and given and all(isinstance(t, str) for t in given)):
            texts = [given] if isinstance(given, str) else given
            if len(texts) > MAX_INPUTS or not all(texts):
                raise said(f'"input" must hold 1 to {MAX_INPUTS} non-empty texts')
            return ("text", list(texts))
        if isinstance(given, list) and given and (all(_is_id(x) for x in given) or all(_is_ids(x) for x in given)):
            sequences = [given] if _is_id(given[0]) else given
            if len(sequences) > MAX_INPUTS:
                raise said(f'"input" must hold 1 to {MAX_INPUTS} non-empty token id lists')
            return ("ids", [list(s) for s in sequences])
        raise said('"input" must be a text, a list of texts, a list of token ids, or a list of those')

    @model_validator(mode="after")
    def _given(self) -> ClassifyBody:
        if self.input is None:
            raise said('"input" must be a text, a list of texts, a list of token ids, or a list of those')
        return self


__all__ = ["MAX_INPUTS", "ClassifyBody", "Message", "ScoreBody", "ScorePairBody"]
