"""The wire contract: span names and attribute keys (DESIGN.md section 2).

Other code, the collector, the adapters and acceptance checks rely on these exact strings; every module uses
these constants so that a rename is one edit.
"""

from __future__ import annotations

# --- OpenTelemetry GenAI semantic conventions -------------------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"  # the gateway: from the harness's headers (a join key)
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_REQUEST_TOP_K = "gen_ai.request.top_k"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_FREQUENCY_PENALTY = "gen_ai.request.frequency_penalty"
GEN_AI_REQUEST_PRESENCE_PENALTY = "gen_ai.request.presence_penalty"
GEN_AI_REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
GEN_AI_REQUEST_SEED = "gen_ai.request.seed"
GEN_AI_REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
# The tools a request offered the model (opt-in, recorded with message content): a JSON list in the conventions'
# shape, `{"type": "function", "name", "description", "parameters"}` each.
GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
# The log/event name the GenAI conventions give to message content when it is recorded as an event.
GEN_AI_CONTENT_EVENT = "gen_ai.client.inference.operation.details"

SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

# gen_ai.operation.name values
OP_CHAT = "chat"
OP_TEXT_COMPLETION = "text_completion"
OP_INVOKE_AGENT = "invoke_agent"
OP_EXECUTE_TOOL = "execute_tool"
OP_INVOKE_WORKFLOW = "invoke_workflow"
# The latest conventions (`capture.conventions`, opt-in): a framework runner's entry point is a conversation turn.
OP_HANDLE_CONVERSATION_TURN = "handle_conversation_turn"
GEN_AI_INVOCATION_IS_NESTED = "gen_ai.invocation.is_nested"
GEN_AI_WORKFLOW_NAME = "gen_ai.workflow.name"
GEN_AI_WORKFLOW_NESTED = "gen_ai.workflow.nested"  # ADK's, on a workflow run inside another
GENERIC_PART = "generic"  # a message part no part type fits: `{"type": "generic", "generic_type": ..., fields}`
# Operations whose spans are LLM calls (what adapters select on; never a span-name regex).
LLM_OPERATIONS = frozenset({OP_CHAT, OP_TEXT_COMPLETION})

# --- Our own data, under agl. ------------------------------------------------------------------------------
AGL_ROLLOUT_ID = "agl.rollout.id"
AGL_ATTEMPT_ID = "agl.attempt.id"
# On the runner's `invoke_agent` span around a rollout: the LitAgent's names (its `name`, its class name), which
# `agent_match` may name to select every call of the rollout.
AGL_ROLLOUT_AGENT_NAMES = "agl.rollout.agent_names"
AGL_PROMPT_TOKEN_IDS = "agl.llm.prompt_token_ids"
AGL_RESPONSE_TOKEN_IDS = "agl.llm.response_token_ids"
AGL_RESPONSE_LOGPROBS = "agl.llm.response_logprobs"
# Set only when the ids are not the ones the model sampled: "retokenized:<tokenizer>" (an ATIF import asked for it)
AGL_TOKEN_IDS_SOURCE = "agl.llm.token_ids_source"
AGL_TOKEN_IDS_COMPLETE = "agl.llm.token_ids_complete"
# The version of the policy weights that sampled the response (a replica's weight version, a sampler snapshot).
AGL_POLICY_VERSION = "agl.llm.policy_version"
# Where a policy replica of ours names that version: a top-level field of its response (the first chunk of a stream),
# beside vLLM's `prompt_token_ids`, so the agent's instrumented client and the policy gateway both record it.
POLICY_VERSION_FIELD = "agl_policy_version"
# A policy per agent: the policy (a LoRA adapter, or a model) that sampled the response; a replica of ours names it in
# its response's top-level `agl_policy` field, next to the version.
AGL_LLM_POLICY = "agl.llm.policy"
# The request header that names the calling agent (the capture layer sends it inside a rollout; bare clients may).
AGENT_NAME_HEADER = "x-agl-agent-name"
POLICY_FIELD = "agl_policy"
BASE_POLICY = "base"  # the gateway's name for the base model, which serves the calls no policy claims (never trained)
# n > 1: choice 0 uses the keys above; choices 1..n-1 use these templates (format with the choice index).
AGL_CHOICE_COUNT = "agl.llm.choice_count"
AGL_TOOLS_OFFERED = "agl.llm.tools_offered"  # how many tools the request offered the model (set when any)
# The API the agent spoke when the gateway translated it ("anthropic.messages", "openai.responses"); absent for chat.
AGL_LLM_DIALECT = "agl.llm.dialect"
TOOL_CALL_FINISH_REASONS = frozenset({"tool_calls", "tool_use", "function_call"})  # OpenAI chat, Anthropic, legacy
AGL_CHOICE_RESPONSE_TOKEN_IDS = "agl.llm.choice.{index}.response_token_ids"
AGL_CHOICE_RESPONSE_LOGPROBS = "agl.llm.choice.{index}.response_logprobs"
# The trainer's span for each training step (service `agl-trainer`): its run, its number, and every metric the step
# logged as an `agl.metric.<name>` attribute.
TRAINING_STEP_SPAN = "agl.training.step"
TRAINER_SERVICE = "agl-trainer"
AGL_RUN_ID = "agl.run.id"
AGL_TRAINING_STEP = "agl.training.step"
AGL_METRIC_PREFIX = "agl.metric."
# What a step trained, one entry per sample (parallel lists): its rollout, attempt and sampling policy version (-1:
# not recorded). Written only when the update ran; a checker proves from them that no rollout trained twice.
AGL_TRAINED_ROLLOUTS = "agl.training.trained.rollout_ids"
AGL_TRAINED_ATTEMPTS = "agl.training.trained.attempt_ids"
AGL_TRAINED_VERSIONS = "agl.training.trained.policy_versions"
# On-policy distillation: a span per scored sample (service `agl-trainer`), named for its rollout and attempt with
# other keys than a rollout's own spans (it is the trainer's, not the rollout's): the call spans it covers and the
# teacher's logprob of each of their response tokens, which the rollout view shows token by token.
TEACHER_SPAN = "agl.training.teacher"
AGL_TEACHER_ROLLOUT = "agl.teacher.rollout_id"
AGL_TEACHER_ATTEMPT = "agl.teacher.attempt_id"
AGL_TEACHER_SPAN_IDS = "agl.teacher.span_ids"
AGL_TEACHER_LOGPROBS = "agl.teacher.logprobs"
AGL_REWARD_VALUE = "agl.reward.value"
AGL_REWARD_NAME = "agl.reward.name"
AGL_REWARD_RESPONSE_ID = "agl.reward.response_id"
AGL_REWARD_SOURCE = "agl.reward.source"  # what gave the reward: a reward model's name, "execution", ...
REWARD_MODEL_SPAN_PREFIX = "score "  # the span of one call to a reward model: "score {model}"
AGL_REWARD_MODEL_URL = "agl.reward_model.url"
AGL_REWARD_MODEL_VERSION = "agl.reward_model.version"
AGL_REWARD_MODEL_SCORE = "agl.reward_model.score"

# Baggage keys: the rollout identity crossing process boundaries beside `traceparent`.
BAGGAGE_ROLLOUT_ID = AGL_ROLLOUT_ID
BAGGAGE_ATTEMPT_ID = AGL_ATTEMPT_ID

# --- Span names ---------------------------------------------------------------------------------------------
REWARD_SPAN_NAME = "agl.reward"
DEFAULT_REWARD_NAME = "primary"
AGENT_SPAN_PREFIX = "invoke_agent "
TOOL_SPAN_PREFIX = "execute_tool "


def agent_span_name(agent_name: str) -> str:
    return AGENT_SPAN_PREFIX + agent_name


def tool_span_name(tool_name: str) -> str:
    return TOOL_SPAN_PREFIX + tool_name


def llm_span_name(operation: str, model: str | None) -> str:
    return f"{operation} {model}" if model else operation
