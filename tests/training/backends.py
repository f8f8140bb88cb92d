"""A training-loop backend of our own for tests (the way a user adds one): the test server as its replica."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lightning_otel.testing import OpenAITestServer
from lightning_otel.training.loop.backend import Backend, PolicyReplicas
from lightning_otel.training.loop.samples import Sample


class RecordingBackend(Backend):
    """A replica that answers with 1 to 5 words in turn (rewards vary within a group), after `latency_s`, naming the
    version that sampled it; updates are recorded (each taking `update_s`); each publish serves the loop's version;
    checkpoints are files."""

    name = "recording"

    def __init__(self, folder: Path, *, resume: bool = False, latency_s: float = 0.0, update_s: float = 0.0) -> None:
        self.folder, self.resume, self.latency_s, self.update_s = folder, resume, latency_s, update_s
        self.server: OpenAITestServer | None = None
        self.updates: list[tuple[int, list[Sample]]] = []
        self.version = 0
        self._words = itertools.count()

    @contextmanager
    def serving(self) -> Iterator[PolicyReplicas]:
        replies = lambda body: " ".join(["word"] * (next(self._words) % 5 + 1))  # noqa: E731
        with OpenAITestServer(replies, latency_s=self.latency_s) as server:
            self.server = server
            server.policy_version = self.version  # every answer names the version that sampled it
            yield PolicyReplicas([server.base_url], "agl-tiny")

    def update(self, samples: Sequence[Sample], step: int) -> dict[str, float]:
        self.updates.append((step, list(samples)))
        time.sleep(self.update_s)  # an update that takes time: asynchronous training overlaps rollouts with it
        return {"recording/samples": float(len(samples))}

    def publish(self, version: int) -> None:
        self.version = version
        if self.server is not None:
            self.server.policy_version = version

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
