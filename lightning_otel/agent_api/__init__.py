"""The agent author's API: what an agent is written against and loads with it, in its runner process or its own
service. `LitAgent` and `@rollout` (with `Rollout`, the attempt's identity), the resources an agent reads (`LLM`,
`ProxyLLM`, `PromptTemplate`), `HttpAgent` (an agent that is a service), loading an agent by `module:name`, and the
policy's address for services that start on their own.

May import capture only (an agent's calls are traced); the collector, the runner and the trainer's orchestration are
other rooms.
"""
