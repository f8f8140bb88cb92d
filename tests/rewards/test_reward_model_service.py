"""The reward-model service on loopback: /score, /score-pair and /classify agree with the model scored directly;
50 concurrent requests are batched and each gets its own scores; bad input is a 400 naming the problem; auth;
idempotent retries by request id."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys

import httpx
import pytest

from lightning_otel.rewards.scorer import preference_probability
from tests.rewards.conftest import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def conversation(question: str, answer: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def post(url: str, path: str, body: object, **headers: str) -> httpx.Response:
    return httpx.post(url + path, json=body, headers={**AUTH, **headers}, timeout=60)


def test_score_and_score_pair_agree_with_the_model(service: str, scorer) -> None:
    conversations = [conversation("Which drug treats migraine?", "Sumatriptan."), conversation("Hi", "Hello there")]
    answer = post(
        service, "/score", {"inputs": [{"id": "a", "messages": conversations[0]}, {"messages": conversations[1]}]}
    ).json()
    expected = [scorer.score([c])[0] for c in conversations]  # one at a time: no padding involved
    assert [item["id"] for item in answer["data"]] == ["a", 1] and answer["model"] == "tiny-rm"
    assert [item["score"] for item in answer["data"]] == pytest.approx(expected, abs=1e-5)
    assert len(answer["model_version"]) == 12
    pair = post(
        service,
        "/score-pair",
        {
            "messages": conversations[0][:1],
            "chosen": "Sumatriptan.",
            "rejected": {"role": "assistant", "content": "No idea."},
        },
    ).json()
    rejected = scorer.score([conversation("Which drug treats migraine?", "No idea.")])[0]
    assert pair["chosen_score"] == pytest.approx(expected[0], abs=1e-5)
    assert pair["rejected_score"] == pytest.approx(rejected, abs=1e-5)
    assert pair["margin"] == pytest.approx(pair["chosen_score"] - pair["rejected_score"])
    assert pair["p_chosen"] == pytest.approx(1 / (1 + math.exp(-pair["margin"])))


def test_classify_speaks_vllms_shape_as_verls_reward_loop_reads_it(service: str, scorer) -> None:
    text = scorer.render(conversation("Dose of ibuprofen?", "200-400 mg every 4-6 hours."))
    raw = post(service, "/classify", {"model": "tiny-rm", "input": text, "use_activation": False}).json()
    assert raw["object"] == "list" and raw["data"][-1]["num_classes"] == 1
    assert raw["data"][-1]["probs"][-1] == pytest.approx(scorer.score_texts([text])[0], abs=1e-5)  # verl's read
    assert raw["usage"]["prompt_tokens"] > 0
    squashed = post(service, "/classify", {"input": [text, text]}).json()
    assert [d["index"] for d in squashed["data"]] == [0, 1]
    assert squashed["data"][0]["probs"][0] == pytest.approx(preference_probability(raw["data"][0]["probs"][0], 0))
    ids = scorer.tokenizer(text, add_special_tokens=False)["input_ids"]
    by_ids = post(service, "/classify", {"input": ids, "use_activation": False}).json()
    assert by_ids["data"][0]["probs"][0] == pytest.approx(raw["data"][0]["probs"][0], abs=1e-5)
    assert len(post(service, "/classify", {"input": [ids, ids[:5]]}).json()["data"]) == 2


def test_fifty_concurrent_requests_are_batched_and_each_gets_its_own_scores(service: str, scorer) -> None:
    questions = [conversation(f"Question {i}?", "An answer " + "with more words " * (i % 7)) for i in range(50)]
    expected = [scorer.score([c])[0] for c in questions]

    async def hammer() -> list[float]:
        async with httpx.AsyncClient(base_url=service, headers=AUTH, timeout=60) as client:
            answers = await asyncio.gather(
                *(client.post("/score", json={"inputs": [{"messages": c}]}) for c in questions)
            )
        assert all(a.status_code == 200 for a in answers)
        return [a.json()["data"][0]["score"] for a in answers]

    assert asyncio.run(hammer()) == pytest.approx(expected, abs=1e-4)  # padding in a batch changes nothing
    stats = httpx.get(service + "/healthz").json()["batches"]["text"]
    assert stats["requests"] == 50 and stats["items"] == 50
    assert stats["batches"] < 25 and stats["largest_batch"] > 1, stats


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/score", {}, '"inputs" must be a list'),
        ("/score", {"inputs": [{"messages": []}]}, "non-empty list"),
        ("/score", {"inputs": [{"messages": [{"role": "user", "content": "q"}]}]}, "last message must be"),
        ("/score", {"inputs": [{"messages": [{"role": "user", "content": 3}]}]}, 'string "content"'),
        ("/score", {"inputs": [{"messages": [{"role": "assistant", "content": "a"}]}] * 257}, "1 to 256"),
        ("/score", {"model": "other", "inputs": []}, "serves the model 'tiny-rm'"),
        ("/score-pair", {"messages": [{"role": "user", "content": "q"}], "chosen": "a"}, '"rejected" must be'),
        ("/classify", {"input": []}, '"input" must be'),
        ("/classify", {"input": [1, [2]]}, '"input" must be'),
        ("/classify", {"input": "x", "use_activation": "yes"}, "use_activation"),
        ("/classify", {"input": [-1]}, '"input" must be'),
    ],
)
def test_bad_input_is_a_400_naming_the_problem(service: str, path: str, body: object, message: str) -> None:
    response = post(service, path, body)
    assert response.status_code == 400 and message in response.json()["error"]["message"], response.text


def test_not_json_auth_and_the_service_keeps_serving(service: str) -> None:
    assert httpx.post(service + "/score", content=b"{oops", headers=AUTH).status_code == 400
    assert httpx.post(service + "/score", content=b"[1]", headers=AUTH).status_code == 400
    body = {"inputs": [{"messages": conversation("q", "a")}]}
    assert httpx.post(service + "/score", json=body).status_code == 401
    assert httpx.post(service + "/score", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(service + "/v1/models").status_code == 401
    assert httpx.get(service + "/v1/models", headers=AUTH).json()["data"][0]["id"] == "tiny-rm"
    health = httpx.get(service + "/healthz")  # open: probes carry no token
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert post(service, "/score", body).status_code == 200


def test_a_retried_request_id_is_answered_from_memory(service: str) -> None:
    body = {"inputs": [{"messages": conversation("q", "a")}]}
    first = post(service, "/score", body, **{"X-Request-Id": "r-1"}).json()
    again = post(service, "/score", body, **{"X-Request-Id": "r-1"}).json()
    assert again == first
    assert httpx.get(service + "/healthz").json()["batches"]["text"]["requests"] == 1  # scored once
    other = post(service, "/score", {"inputs": [{"messages": conversation("q", "b")}]}, **{"X-Request-Id": "r-1"})
    assert other.status_code == 409 and "already used" in other.json()["error"]["message"]


def test_serve_refuses_to_listen_beyond_loopback_without_a_key(reward_model_dir) -> None:
    command = [
        sys.executable,
        "-m",
        "lightning_otel.cli",
        "reward-model",
        "serve",
        "--model",
        str(reward_model_dir),
        "--host",
        "0.0.0.0",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin"})
    assert result.returncode == 2 and "without --api-key" in result.stderr


def test_a_folder_without_a_trained_head_is_refused(base_model_dir) -> None:
    from lightning_otel.rewards.scorer import NotARewardModel, RewardModelScorer

    with pytest.raises(NotARewardModel, match="no trained score head"):
        RewardModelScorer(base_model_dir)  # a causal LM: transformers would give it a random head
    command = [sys.executable, "-m", "lightning_otel.cli", "reward-model", "serve", "--model", str(base_model_dir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "is not a reward model" in result.stderr
