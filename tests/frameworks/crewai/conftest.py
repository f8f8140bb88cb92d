"""The CrewAI lane (`nox -s crewai`): its own environment (CrewAI pins openai < 3 and OpenTelemetry >= 1.45.1)."""

import os

os.environ.setdefault("CREWAI_STORAGE_DIR", "agl-tests")  # keep CrewAI's local files out of the user's
