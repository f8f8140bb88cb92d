"""What every backend's test on SmolLM2 checks of the calls it trained: each LLM span that recorded the call's
messages has as prompt ids SmolLM2's own chat template rendered from those messages, and as response ids the reply
the agent got, ended by `<|im_end|>` when the sampler stopped."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_otel import semconv

TASKS = [{"task_id": f"t{i}", "question": q} for i, q in enumerate(["What is 2 + 3?", "Name a colour."])]


def one_step(algorithm: Any, folder: Path) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
    """One training step of `algorithm` on the short-answer agent (two tasks; content recorded), on a collector
    storing in `folder`: the step's record and its rollouts' spans."""
    import lightning_otel as agl
    from lightning_otel.collector import Client, EmbeddedCollector

    with EmbeddedCollector.on_sqlite_file(folder / "c.sqlite3") as addresses:
        trainer = agl.Trainer(
            n_runners=1,
            collector=addresses.query,
            progress=False,
            algorithm=algorithm,
            runner_options=agl.RunnerOptions(capture_content=True),
        )
        (step,) = trainer.fit("tests.tinker.agents:short_answer_agent", TASKS).steps
        with Client(addresses.query) as client:
            return step, client.rollouts_spans(step.rollout_ids, latest=True)


def checked_calls(spans: Mapping[str, Sequence[dict[str, Any]]], model_dir: Path) -> dict[tuple[int, ...], dict]:
    """{prompt + response ids: span} of every call checked (the client's copy, which records content)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    end = tokenizer.eos_token_id
    calls = {}
    for rollout in spans.values():
        for span in rollout:
            attributes = span["attributes"]
            if semconv.AGL_RESPONSE_TOKEN_IDS not in attributes or semconv.GEN_AI_INPUT_MESSAGES not in attributes:
                continue  # the gateway's copy of a call records no content; the client's does
            messages = [{"role": m["role"], "content": m["parts"][0]["content"]}
                        for m in json.loads(attributes[semconv.GEN_AI_INPUT_MESSAGES])]  # fmt: skip
            prompt, response = attributes[semconv.AGL_PROMPT_TOKEN_IDS], attributes[semconv.AGL_RESPONSE_TOKEN_IDS]
            rendered = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                     return_dict=True)["input_ids"]  # fmt: skip
            assert list(prompt) == list(rendered)  # SmolLM2's own template, its special tokens
            reply = json.loads(attributes[semconv.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"]
            stopped = attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS][0] == "stop"
            assert (response[-1] == end) == stopped  # it stops on <|im_end|>
            assert tokenizer.decode([t for t in response if t != end]) == reply
            calls[(*prompt, *response)] = span
    return calls
