"""Which version of the OpenTelemetry GenAI semantic conventions our spans follow: decided here, in one place.

By default, the names this project has always emitted. With `OTEL_SEMCONV_STABILITY_OPT_IN` holding
`gen_ai_latest_experimental` (the switch the conventions define for this transition), the latest we follow,
`FOLLOWED`:

- a framework runner's entry point (ADK's `Runner.run`, the OpenAI Agents SDK's `Runner.run`) is a conversation
  turn: operation `handle_conversation_turn`, span `handle_conversation_turn {name}`, `gen_ai.invocation.is_nested`
  false (a workflow run inside it: `invoke_workflow`, nested true) instead of `invoke_workflow` (#571);
- a message part no part type fits is `{"type": "generic", "generic_type": <the provider's type>, ...its fields}`
  instead of being left out (#584);
- with message content on (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`), the
  `gen_ai.client.inference.operation.details` event is recorded beside the span's attributes (#579, recommended):
  as an OTLP log record where our spans go over OTLP (`capture.genai_events`), else as a span event.

Why the old names stay the default: the conventions ask instrumentations that emitted older names not to change them
by default (users' dashboards and queries read them), and every reader here (the adapter, the rollout view, the
export) reads both. Cache-token attributes (#440 `cache_write`, #469) and the inference metrics (#374, #521) are not
emitted by our instrumentors at all, so nothing changes there.
"""

from __future__ import annotations

from opentelemetry import context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from lightning_otel import semconv
from lightning_otel.capture.settings import LATEST_GENAI, SEMCONV_OPT_IN_ENV, latest_genai, settings

OPT_IN_ENV = SEMCONV_OPT_IN_ENV
FOLLOWED = (
    "open-telemetry/semantic-conventions-genai main as of 2026-11 (changelog.d #571 conversation turns, "
    "#579 operation-details event, #584 generic parts)"
)


class ConversationTurnProcessor(SpanProcessor):
    """The latest conventions on spans frameworks make themselves (ADK's): its runner's `invoke_workflow` entry
    span, started with no `gen_ai.workflow.nested`, becomes `handle_conversation_turn`; a nested workflow says so in
    `gen_ai.invocation.is_nested`. Active only while `settings.latest_genai` (read when each span starts)."""

    def __init__(self) -> None:
        self.enabled = True

    def on_start(self, span: Span, parent_context: context.Context | None = None) -> None:
        if not (self.enabled and settings.latest_genai):
            return
        attributes = span.attributes or {}
        if attributes.get(semconv.GEN_AI_OPERATION_NAME) != semconv.OP_INVOKE_WORKFLOW:
            return
        if attributes.get(semconv.GEN_AI_WORKFLOW_NESTED):
            span.set_attribute(semconv.GEN_AI_INVOCATION_IS_NESTED, True)
            return
        name = attributes.get(semconv.GEN_AI_WORKFLOW_NAME)
        span.update_name(turn_span_name(str(name) if name else None))
        span.set_attribute(semconv.GEN_AI_OPERATION_NAME, semconv.OP_HANDLE_CONVERSATION_TURN)
        span.set_attribute(semconv.GEN_AI_INVOCATION_IS_NESTED, False)

    def on_end(self, span: ReadableSpan) -> None:
        return None


def turn_span_name(name: str | None) -> str:
    return f"{semconv.OP_HANDLE_CONVERSATION_TURN} {name}" if name else semconv.OP_HANDLE_CONVERSATION_TURN


__all__ = ["FOLLOWED", "LATEST_GENAI", "OPT_IN_ENV", "ConversationTurnProcessor", "latest_genai", "turn_span_name"]
