// A TypeScript agent on the Anthropic SDK, traced with OpenTelemetry's Node SDK: a planner looks the word up with
// a tool, a writer answers. Nothing here knows about training: the model is whatever ANTHROPIC_BASE_URL serves,
// the spans go wherever OTEL_EXPORTER_OTLP_ENDPOINT says (lightning_otel.harness_env sets both for a rollout).
//
//   npx tsx agent.ts '{"prompt": "Repeat the word apple.", "word": "apple"}'    -> {"answer": "..."} on stdout
import Anthropic from "@anthropic-ai/sdk";
import { SpanStatusCode, trace } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { UndiciInstrumentation } from "@opentelemetry/instrumentation-undici";
import { NodeSDK } from "@opentelemetry/sdk-node";

// fetch (undici) instrumented: every model request carries the traceparent of the agent span it was made in
const sdk = new NodeSDK({
  serviceName: "typescript-agent",
  traceExporter: new OTLPTraceExporter(),
  instrumentations: [new UndiciInstrumentation()],
});
sdk.start();
const tracer = trace.getTracer("typescript-agent");

// An agent's work as a span named by the GenAI conventions: the calls made inside it are its calls.
async function asAgent<T>(name: string, work: () => Promise<T>): Promise<T> {
  const attributes = { "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name };
  return tracer.startActiveSpan(`invoke_agent ${name}`, { attributes }, async (span) => {
    try {
      return await work();
    } catch (error) {
      span.recordException(error as Error);
      span.setStatus({ code: SpanStatusCode.ERROR });
      throw error;
    } finally {
      span.end();
    }
  });
}

type Task = { prompt: string; word: string };
const task: Task = JSON.parse(process.argv[2]);
const client = new Anthropic({ maxRetries: 2 }); // ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY from the environment
const model = process.env.AGENT_MODEL ?? "policy";
const tools: Anthropic.Tool[] = [
  {
    name: "lookup_word",
    description: "The word the task is about.",
    input_schema: { type: "object", properties: {} },
  },
];

const messages: Anthropic.MessageParam[] = [{ role: "user", content: task.prompt }];
await asAgent("planner", async () => {
  const plan = await client.messages.create({ model, max_tokens: 256, messages, tools });
  messages.push({ role: "assistant", content: plan.content });
  const results: Anthropic.ToolResultBlockParam[] = plan.content
    .filter((block): block is Anthropic.ToolUseBlock => block.type === "tool_use")
    .map((block) => ({ type: "tool_result", tool_use_id: block.id, content: task.word }));
  messages.push({ role: "user", content: results.length ? results : "Now write the answer." });
});
const answer = await asAgent("writer", async () => {
  // streamed, as a chat UI would: the SDK reads the Messages API's event stream
  const reply = await client.messages.stream({ model, max_tokens: 256, messages, tools }).finalMessage();
  return reply.content.map((block) => (block.type === "text" ? block.text : "")).join("");
});
console.log(JSON.stringify({ answer }));
await sdk.shutdown(); // the spans are sent before the process ends
