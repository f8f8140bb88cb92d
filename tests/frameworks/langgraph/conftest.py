"""The LangGraph / LangChain lane (`nox -s langgraph`): its own environment."""
