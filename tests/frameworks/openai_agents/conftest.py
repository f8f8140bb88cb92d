"""The OpenAI Agents SDK lane (`nox -s openai_agents`): its own environment (openai >= 3)."""
