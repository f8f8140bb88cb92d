"""The AutoGen agentchat lane (`nox -s autogen`): its own environment."""
