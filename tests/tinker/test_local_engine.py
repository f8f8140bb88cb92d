"""The local engine against a direct torch computation: each loss (Tinker's definitions), its gradients, their
accumulation across forward_backward calls, the optimizer step (torch's AdamW with Tinker's settings), sampler
snapshots and versions, and state save/load."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from lightning_otel.runs.model_export import latest_checkpoint
from lightning_otel.training.tinker import local_engine
from lightning_otel.training.tinker.backend import TinkerBackend
from lightning_otel.training.tinker.local_engine import LocalEngine
from lightning_otel.training.tinker.saved_state import STATE_FILE
from lightning_otel.training.tinker.types import AdamParams, Datum, SamplingParams


def make_engine(model_dir: Path, **options) -> LocalEngine:
    engine = LocalEngine(model_dir, rank=4, seed=1, micro_batch_size=2, **options)
    with torch.no_grad():  # LoRA's B starts at 0; make the adapter matter so gradients reach every factor
        for name, parameter in engine.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    return engine


def sampled_datums(engine: LocalEngine, count: int = 3) -> list[Datum]:
    """Prompts + responses sampled by the engine's own sampler, with per-token advantages of mixed signs and one
    observation token masked out (advantage 0)."""
    sampler = engine.save_weights_and_get_sampler("probe")
    tokenizer = engine.chat_tokenizer
    datums = []
    for index in range(count):
        prompt = tokenizer.encode(tokenizer.render_chat([{"role": "user", "content": f"Question {index}?"}]))
        [sequence] = sampler.sample(prompt, 1, SamplingParams(max_tokens=6 + index, seed=index))
        response = sequence.tokens
        advantage = [0.0] * len(prompt) + [(-1.0) ** index * (0.5 + t / 10) for t in range(len(response))]
        advantage[len(prompt) + 1] = 0.0  # an inserted observation token: no gradient
        # sampler logprobs shifted so some ratios fall outside PPO's [0.8, 1.2]
        logprobs = [0.0] * len(prompt) + [lp + (0.4 if t % 2 else -0.3) for t, lp in enumerate(sequence.logprobs)]
        weights = [0.0] * len(prompt) + [1.0] * len(response)
        datums.append(
            Datum.from_sequence(prompt + response, {"advantages": advantage, "logprobs": logprobs, "weights": weights})
        )
    return datums


def reference_loss(
    model: torch.nn.Module, datums: list[Datum], loss_fn: str, tis_cap: float | None = None
) -> torch.Tensor:
    """Tinker's definitions, written out with no padding: one sequence at a time, summed. `tis_cap`: truncated
    importance sampling, min(ratio, cap) as a constant weight on the log-probability's gradient."""
    total = torch.zeros(())
    for datum in datums:
        logits = model(input_ids=torch.tensor([datum.model_input])).logits[0].float()
        targets = torch.tensor(datum.loss_fn_inputs["target_tokens"])
        logp = torch.log_softmax(logits, dim=-1)[torch.arange(len(targets)), targets]
        if loss_fn == "cross_entropy":
            total = total + (-torch.tensor(datum.loss_fn_inputs["weights"]) * logp).sum()
            continue
        ratio = torch.exp(logp - torch.tensor(datum.loss_fn_inputs["logprobs"]))
        advantages = torch.tensor(datum.loss_fn_inputs["advantages"])
        if loss_fn == "importance_sampling" and tis_cap is not None:
            weight = torch.clamp(ratio.detach(), max=tis_cap)
            total = total - (weight * advantages * (logp - logp.detach() + 1.0)).sum()  # value min(r, C) * A
        elif loss_fn == "importance_sampling":
            total = total - (ratio * advantages).sum()
        else:
            clipped = torch.clamp(ratio, 0.8, 1.2)
            total = total - torch.minimum(ratio * advantages, clipped * advantages).sum()
    return total


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling", "ppo"])
def test_loss_and_gradients_match_torch(tiny_model_dir: Path, loss_fn: str) -> None:
    engine = make_engine(tiny_model_dir)
    datums = sampled_datums(engine)
    reference_model = copy.deepcopy(engine.model)

    output = engine.forward_backward(datums, loss_fn)
    expected = reference_loss(reference_model, datums, loss_fn)
    expected.backward()

    assert output.metrics["loss:sum"] == pytest.approx(float(expected.detach()), rel=1e-5, abs=1e-6)
    reference_grads = dict(reference_model.named_parameters())
    compared = 0
    for name, parameter in engine.model.named_parameters():
        if parameter.requires_grad:
            assert parameter.grad is not None, name
            torch.testing.assert_close(parameter.grad, reference_grads[name].grad, rtol=1e-4, atol=1e-6)
            compared += 1
    assert compared > 0
    # per-datum outputs: each target's logprob under the trained weights, one per position
    assert [len(out["logprobs"]) for out in output.loss_fn_outputs] == [len(d.model_input) for d in datums]


def test_truncated_importance_sampling_caps_each_tokens_weight(tiny_model_dir: Path) -> None:
    engine = make_engine(tiny_model_dir)
    datums = sampled_datums(engine)  # odd tokens' sampler logprobs 0.4 too high, even ones 0.3 too low: ratios ~1.35
    reference_model = copy.deepcopy(engine.model)
    output = engine.forward_backward(datums, "importance_sampling", {"tis_cap": 1.1})
    expected = reference_loss(reference_model, datums, "importance_sampling", tis_cap=1.1)
    expected.backward()
    assert output.metrics["loss:sum"] == pytest.approx(float(expected.detach()), rel=1e-5, abs=1e-6)
    reference_grads = dict(reference_model.named_parameters())
    for name, parameter in engine.model.named_parameters():
        if parameter.requires_grad:
            torch.testing.assert_close(parameter.grad, reference_grads[name].grad, rtol=1e-4, atol=1e-6)
    engine.model.zero_grad()
    uncapped = engine.forward_backward(datums, "importance_sampling").metrics["loss:sum"]
    assert uncapped != pytest.approx(output.metrics["loss:sum"])  # the cap bit: some ratios were above 1.1


def test_ppo_clips_where_importance_sampling_does_not(tiny_model_dir: Path) -> None:
    engine = make_engine(tiny_model_dir)
    datums = sampled_datums(engine)
    ppo = engine.forward_backward(datums, "ppo").metrics["loss:sum"]
    engine.model.zero_grad()
    plain = engine.forward_backward(datums, "importance_sampling").metrics["loss:sum"]
    assert ppo != pytest.approx(plain)  # the shifted sampler logprobs put ratios outside [0.8, 1.2]


def test_gradients_accumulate_until_optim_step(tiny_model_dir: Path) -> None:
    engine = make_engine(tiny_model_dir)
    datums = sampled_datums(engine)
    engine.forward_backward(datums[:1], "importance_sampling")
    engine.forward_backward(datums[1:], "importance_sampling")
    accumulated = {n: p.grad.clone() for n, p in engine.model.named_parameters() if p.requires_grad}

    fresh = make_engine(tiny_model_dir)
    fresh.forward_backward(datums, "importance_sampling")
    for name, parameter in fresh.model.named_parameters():
        if parameter.requires_grad:
            torch.testing.assert_close(parameter.grad, accumulated[name], rtol=1e-4, atol=1e-6)

    engine.optim_step(AdamParams(learning_rate=1e-3))
    assert all(p.grad is None for p in engine.trainable)  # cleared by the step


def test_zero_advantage_tokens_get_no_gradient(tiny_model_dir: Path) -> None:
    engine = make_engine(tiny_model_dir)
    [datum] = sampled_datums(engine, 1)
    silent = Datum(datum.model_input, {**datum.loss_fn_inputs, "advantages": [0.0] * len(datum.model_input)})
    output = engine.forward_backward([silent], "importance_sampling")
    assert output.metrics["loss:sum"] == 0.0
    assert all(float(p.grad.abs().max()) == 0.0 for p in engine.trainable)


def test_optim_step_is_torch_adamw_with_tinker_settings(tiny_model_dir: Path) -> None:
    engine = make_engine(tiny_model_dir)
    datums = sampled_datums(engine)
    params = AdamParams(learning_rate=5e-3, beta1=0.8, beta2=0.9, eps=1e-8, weight_decay=0.01, grad_clip_norm=0.5)
    reference = copy.deepcopy(engine.model)
    reference_params = [p for p in reference.parameters() if p.requires_grad]

    stats = engine.optim_step  # two steps: the settings apply from the first, moments carry over
    for _ in range(2):
        engine.forward_backward(datums, "ppo")
        metrics = stats(params).metrics
        reference_loss(reference, datums, "ppo").backward()
        torch.nn.utils.clip_grad_norm_(reference_params, 0.5)
        if not hasattr(reference, "_adam"):
            reference._adam = torch.optim.AdamW(reference_params, lr=5e-3, betas=(0.8, 0.9), eps=1e-8,
                                                weight_decay=0.01)  # fmt: skip
        reference._adam.step()
        reference._adam.zero_grad()
    assert metrics["grad_norm"] > 0.5  # clipping was active
    for (name, ours), theirs in zip(
        [(n, p) for n, p in engine.model.named_parameters() if p.requires_grad], reference_params, strict=True
    ):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-6, msg=name)


def test_samplers_are_versioned_snapshots(tiny_model_dir: Path) -> None:
    engine = make_engine(tiny_model_dir)
    datums = sampled_datums(engine)
    first = engine.save_weights_and_get_sampler("a")
    prompt = engine.chat_tokenizer.encode("Who are you?")
    before = first.sample(prompt, 1, SamplingParams(max_tokens=5, seed=3))[0]
    engine.forward_backward(datums, "cross_entropy")
    engine.optim_step(AdamParams(learning_rate=5e-2))
    second = engine.save_weights_and_get_sampler("b")
    assert second.version == first.version + 1
    again = first.sample(prompt, 1, SamplingParams(max_tokens=5, seed=3))[0]
    assert again.tokens == before.tokens and again.logprobs == pytest.approx(before.logprobs)  # a frozen snapshot
    after = second.sample(prompt, 1, SamplingParams(max_tokens=5, seed=3))[0]
    assert after.logprobs != pytest.approx(before.logprobs)  # the new weights


def test_state_round_trip(tiny_model_dir: Path, tmp_path: Path) -> None:
    engine = make_engine(tiny_model_dir, log_dir=tmp_path)
    datums = sampled_datums(engine)
    engine.forward_backward(datums, "importance_sampling")
    engine.optim_step(AdamParams(learning_rate=1e-2))
    path = engine.save_state("step-1")
    trained = {n: p.detach().clone() for n, p in engine.model.named_parameters() if p.requires_grad}

    restored = LocalEngine(tiny_model_dir, rank=4, seed=9, log_dir=tmp_path)
    restored.load_state(path)
    assert restored.steps == 1
    for name, parameter in restored.model.named_parameters():
        if parameter.requires_grad:
            torch.testing.assert_close(parameter, trained[name])
    restored.forward_backward(datums, "importance_sampling")
    restored.optim_step(AdamParams(learning_rate=1e-2))  # the optimizer's moments came back too


def test_bad_datums_are_refused_before_compute(tiny_model_dir: Path) -> None:
    engine = make_engine(tiny_model_dir)
    with pytest.raises(ValueError, match="lacks"):
        engine.forward_backward([Datum([1, 2], {"target_tokens": [2, 3]})], "importance_sampling")
    with pytest.raises(ValueError, match="unknown loss_fn"):
        engine.forward_backward([Datum([1, 2], {"target_tokens": [2, 3]})], "dro")
    with pytest.raises(ValueError, match="positions"):
        Datum([1, 2, 3], {"target_tokens": [2, 3]})


@pytest.mark.parametrize("temperature", [0.5, 0.7, 1.0])
def test_at_any_sampling_temperature_the_first_minibatch_ratio_is_one(tiny_model_dir: Path, temperature: float) -> None:
    """Sampled at a temperature, trained with the same one: the learner's log-probs of the sampled tokens are the
    sampler's (the importance ratio of an on-policy token is 1), as Tinker's facade arranges for any sampling."""
    engine = make_engine(tiny_model_dir)
    sampler = engine.save_weights_and_get_sampler("probe")
    tokenizer = engine.chat_tokenizer
    datums, sampled = [], []
    for index in range(3):
        prompt = tokenizer.encode(tokenizer.render_chat([{"role": "user", "content": f"Question {index}?"}]))
        params = SamplingParams(max_tokens=8, temperature=temperature, seed=index)
        [sequence] = sampler.sample(prompt, 1, params)
        logprobs = [0.0] * len(prompt) + list(sequence.logprobs)
        advantages = [0.0] * len(prompt) + [1.0] * len(sequence.tokens)
        datums.append(Datum.from_sequence(prompt + sequence.tokens, {"advantages": advantages, "logprobs": logprobs}))
        sampled.append((len(prompt), list(sequence.logprobs)))
    output = engine.forward_backward(datums, "importance_sampling", {"temperature": temperature})
    for (start, logprobs), out in zip(sampled, output.loss_fn_outputs, strict=True):
        learner = out["logprobs"][start - 1 : start - 1 + len(logprobs)]  # targets are shifted by one
        assert learner == pytest.approx(logprobs, abs=2e-4)
    if temperature != 1.0:  # at temperature 1 the learner's log-probs would not be the sampler's
        untempered = make_engine(tiny_model_dir).forward_backward(datums, "importance_sampling")
        start, logprobs = sampled[0]
        assert untempered.loss_fn_outputs[0]["logprobs"][start - 1 : start - 1 + len(logprobs)] != pytest.approx(
            logprobs, abs=2e-4
        )


def test_tinker_trains_a_sampling_temperature_with_tempered_log_probs(tiny_model_dir: Path) -> None:
    import lightning_otel

    options = lightning_otel.TrainingOptions(sampling=lightning_otel.Sampling(temperature=0.7))
    tinker = lightning_otel.Tinker(make_engine(tiny_model_dir), options)
    assert tinker.loss_fn_config["temperature"] == 0.7
    assert "temperature" not in lightning_otel.Tinker(make_engine(tiny_model_dir)).loss_fn_config  # 1: nothing to do

    class AtOne:  # an engine that computes log-probs at temperature 1 only (the hosted service's)
        base_model = "remote"

    with pytest.raises(ValueError, match="computes log-probs at temperature 1 only"):
        lightning_otel.Tinker(AtOne(), options)  # type: ignore[arg-type]


def test_rows_that_begin_alike_read_their_prefix_once_with_the_same_logprobs_and_gradients(tiny_model_dir: Path):
    """A group's rollouts share their prompt: read once (its keys and values repeated for each row), the loss's
    log-probabilities and the gradients are those of reading every row whole."""
    torch.manual_seed(7)
    shared_engine = make_engine(tiny_model_dir, min_shared_prefix=8)
    whole_engine = copy.deepcopy(shared_engine)
    whole_engine.min_shared_prefix = 10**9  # never shared
    prompt = list(range(3, 40))  # 37 tokens every row begins with
    suffixes = [[41, 42, 43], [44, 45], [46, 47, 48, 49, 50], [51]]
    datums = [
        Datum.from_sequence(
            prompt + suffix,
            {
                "advantages": [0.0] * (len(prompt) - 1) + [1.0, -0.5] + [0.25] * (len(suffix) - 1),
                "logprobs": [-1.0] * (len(prompt) + len(suffix)),
            },
        )
        for suffix in suffixes
    ]
    datums.append(Datum.from_sequence([5, 6, 7, 8], {"advantages": [1.0] * 4, "logprobs": [-1.0] * 4}))  # apart
    shared = shared_engine.forward_backward(datums, "importance_sampling", {"temperature": 0.7})
    whole = whole_engine.forward_backward(datums, "importance_sampling", {"temperature": 0.7})
    assert shared.metrics["loss:sum"] == pytest.approx(whole.metrics["loss:sum"], rel=1e-5)
    assert shared.metrics["computed_tokens:sum"] < whole.metrics["computed_tokens:sum"]
    for ours, theirs in zip(shared.loss_fn_outputs, whole.loss_fn_outputs, strict=True):
        assert ours["logprobs"] == pytest.approx(theirs["logprobs"], abs=1e-4)
    grads = dict(zip([n for n, p in whole_engine.model.named_parameters() if p.requires_grad],
                     [p.grad for p in whole_engine.trainable], strict=True))  # fmt: skip
    for (name, parameter), expected in zip(
        [(n, p) for n, p in shared_engine.model.named_parameters() if p.requires_grad], grads.values(), strict=True
    ):
        assert torch.allclose(parameter.grad, expected, atol=1e-5, rtol=1e-4), name


def test_a_save_its_trainer_was_killed_in_is_passed_over_by_resume_and_export(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos run's trainer, killed while it wrote step 2's optimizer: resuming read the truncated file and died.
    A save is whole once its last file is there; resume and export take the latest whole one."""
    engine = make_engine(tiny_model_dir, log_dir=tmp_path)
    datums = sampled_datums(engine)
    engine.forward_backward(datums, "importance_sampling")
    engine.optim_step(AdamParams(learning_rate=1e-2))
    engine.save_state("step-1")
    engine.forward_backward(datums, "importance_sampling")
    engine.optim_step(AdamParams(learning_rate=1e-2))
    broken = Path(engine.save_state("step-2"))
    # what a SIGKILL between the optimizer and the last file leaves: a truncated optimizer, no engine state
    (broken / "optimizer.pt").write_bytes((broken / "optimizer.pt").read_bytes()[:100])
    (broken / STATE_FILE).unlink()

    backend = TinkerBackend(make_engine(tiny_model_dir, log_dir=tmp_path), loss_fn="importance_sampling",
                            loss_fn_config=None, adam=AdamParams(learning_rate=1e-2), resume=True)  # fmt: skip
    assert backend.load() == 1 and backend.engine.steps == 1
    assert latest_checkpoint(tmp_path).name == "step-1"
    with pytest.raises(ValueError, match="not a whole saved state"):
        make_engine(tiny_model_dir, log_dir=tmp_path).load_state(str(broken))

    # saved again (the resumed run reaches step 2): its old last file is gone before the new files are written
    (broken / STATE_FILE).write_text('{"steps": 2, "version": 2}')  # an earlier whole save of step 2

    def killed(*_: object) -> None:  # the kill, just before the last file
        raise RuntimeError("killed")

    monkeypatch.setattr(local_engine, "end_state", killed)
    with pytest.raises(RuntimeError, match="killed"):
        engine.save_state("step-2")
    assert latest_checkpoint(tmp_path).name == "step-1"
