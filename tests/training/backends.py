"""A training-loop backend of our own for tests (the way a user adds one): the test server as its replica."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lightning_otel.testing import OpenAITestServer
from lightning_otel.training.loop.backend import Backend, PolicyReplicas
from lightning_otel.training.loop.samples import Sample


class RecordingBackend(Backend):
    """A replica that answers with 1 to 5 words in turn (rewards vary within a group), after `latency_s`; updates
    are recorded, each one a new version; checkpoints are files."""

    name = "recording"

    def __init__(self, folder: Path, *, resume: bool = False, latency_s: float = 0.0) -> None:
        self.folder, self.resume, self.latency_s = folder, resume, latency_s
        self.updates: list[tuple[int, list[Sample]]] = []
        self.version = 0
        self._dirty = False
        self._words = itertools.count()

    @contextmanager
    def serving(self) -> Iterator[PolicyReplicas]:
        replies = lambda body: " ".join(["word"] * (next(self._words) % 5 + 1))  # noqa: E731
        with OpenAITestServer(replies, latency_s=self.latency_s) as server:
            yield PolicyReplicas([server.base_url], "agl-tiny")

    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        self.updates.append((step, list(samples)))
        self._dirty = True
        return {"recording/samples": float(len(samples))}

    def publish(self, step: int) -> int:
        if self._dirty:
            self.version, self._dirty = self.version + 1, False
        return self.version

    def save(self, step: int) -> str:
        path = self.folder / f"step-{step}.json"
        path.write_text(json.dumps({"version": self.version}))
        return str(path)

    def load(self) -> int:
        saved = sorted(self.folder.glob("step-*.json"), key=lambda p: int(p.stem.split("-")[1]))
        if not self.resume or not saved:
            return 0
        self.version = json.loads(saved[-1].read_text())["version"]
        return int(saved[-1].stem.split("-")[1])
