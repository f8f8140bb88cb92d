"""APO's parts against the project's OpenAI-compatible test server: the critique/edit model through an OpenAI
client, an AsyncOpenAI client and LiteLLM names; an edit that breaks the template's placeholders is not tried (nor
its stand-in, the parent, run again on the same minibatch); templates come back without the fences a model adds; a
run without a PromptTemplate says what to set."""

from __future__ import annotations

import openai
import pytest

import lightning_otel as agl
from lightning_otel.training.apo.chat_model import ChatModel
from lightning_otel.training.apo.critique import RolloutReport, placeholders, strip_fences
from lightning_otel.training.apo.gepa_search import SearchSettings, TraceGEPAAdapter


def test_each_client_kind_reaches_an_openai_compatible_model(monkeypatch) -> None:
    from lightning_otel.testing.server import OpenAITestServer

    with OpenAITestServer(replies=lambda body: f"{body['model']} says hi") as server:
        sync = ChatModel(openai.OpenAI(base_url=server.base_url, api_key="t"))
        assert sync.complete("critic", [{"role": "user", "content": "x"}], 1.0) == "critic says hi"
        asynchronous = ChatModel(openai.AsyncOpenAI(base_url=server.base_url, api_key="t"))
        for _ in range(2):  # one event loop of its own: its pooled connections stay usable
            assert asynchronous.complete("editor", [{"role": "user", "content": "x"}], 0.5) == "editor says hi"
        asynchronous.close()
        monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "t")
        litellm = ChatModel(use_litellm=True)
        assert litellm.complete("openai/critic", [{"role": "user", "content": "x"}], 1.0) == "critic says hi"
    with pytest.raises(ValueError, match="OpenAI-compatible client"):
        ChatModel(None)


def test_an_edit_that_breaks_the_placeholders_is_not_tried() -> None:
    from lightning_otel.testing.server import OpenAITestServer

    edits = iter(["Book a room for {people} people.", "```\nBook {date} for {attendees}, name the room.\n```"])

    def reply(body):
        return "be specific" if body["messages"][0]["content"].startswith("You review") else next(edits)

    seed = "Book {date} for {attendees}."
    with OpenAITestServer(replies=reply) as server:
        chat = ChatModel(openai.OpenAI(base_url=server.base_url, api_key="t"))
        adapter = TraceGEPAAdapter(evaluator=None, chat=chat, settings=SearchSettings("g", "e", 1.0),  # type: ignore[arg-type]
                                   valset=[], seed_template=seed)  # fmt: skip
        report = RolloutReport(task={}, rollout_id="r1", status="succeeded", reward=0.0,
                               conversations=[[{"role": "user", "content": "Book 2026-01-01 for 3."}]])  # fmt: skip
        dataset = {"prompt": [{"report": report}]}
        assert adapter.propose_new_texts({"prompt": seed}, dataset, ["prompt"]) == {"prompt": seed}  # kept
        (rejected,) = adapter.rejected
        assert "people" in (rejected.rejected_because or "") and rejected.parent == "p0"
        child = adapter.propose_new_texts({"prompt": seed}, dataset, ["prompt"])["prompt"]
        assert child == "Book {date} for {attendees}, name the room." and adapter.candidate(child).parent == "p0"

    class CountingEvaluator:  # the runners' side: how many rollouts each evaluation ran
        runs: list[tuple[str, int]] = []

        def evaluate(self, template, batch, *, mode, note):
            self.runs.append((template, len(batch)))
            return [RolloutReport(task=task, rollout_id=f"r{n}", status="succeeded", reward=0.0)
                    for n, task in enumerate(batch)]  # fmt: skip

    edits = iter(["Book a room for {people} people."])
    with OpenAITestServer(replies=reply) as server:
        chat = ChatModel(openai.OpenAI(base_url=server.base_url, api_key="t"))
        evaluator = CountingEvaluator()
        adapter = TraceGEPAAdapter(evaluator=evaluator, chat=chat, settings=SearchSettings("g", "e", 1.0),  # type: ignore[arg-type]
                                   valset=[], seed_template=seed)  # fmt: skip
        minibatch = [{"n": 1}, {"n": 2}]
        parent_run = adapter.evaluate(minibatch, {"prompt": seed}, capture_traces=True)
        kept = adapter.propose_new_texts({"prompt": seed}, adapter.make_reflective_dataset({"prompt": seed}, parent_run,
                                         ["prompt"]), ["prompt"])  # fmt: skip
        assert kept == {"prompt": seed}  # the edit broke a placeholder: the parent stands in for its child
        child_run = adapter.evaluate(minibatch, {"prompt": seed})
        assert child_run.scores == parent_run.scores and evaluator.runs == [(seed, 2)]  # not run twice
        adapter.evaluate([{"n": 3}, {"n": 4}], {"prompt": seed})  # another minibatch runs
        assert evaluator.runs == [(seed, 2), (seed, 2)]
    assert placeholders("{a} {b[0]} {c.d} {{literal}}") == {"a", "b", "c"}
    assert strip_fences("<template>\nHi {x}\n</template>") == "Hi {x}"


def test_a_run_without_a_prompt_template_says_what_to_set(tmp_path) -> None:
    from lightning_otel.testing.server import OpenAITestServer

    with OpenAITestServer() as server:
        apo = agl.APO(openai.OpenAI(base_url=server.base_url, api_key="t"), output_dir=tmp_path / "out")
        trainer = agl.Trainer(n_runners=0, algorithm=apo)
        with pytest.raises(ValueError, match=r"initial_resources=\{'prompt_template'"):
            trainer.fit("tests.tinker.agents:constant_agent", [{"q": 1}], [{"q": 2}])
    with pytest.raises(ValueError, match="beam_width must be >= 1"):
        agl.APO(openai.OpenAI(api_key="t"), beam_width=0)
