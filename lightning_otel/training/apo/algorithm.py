"""`APO`: Agent Lightning's automatic prompt optimisation, as its users wrote it, on this project's Trainer.

    algo = agl.APO(AsyncOpenAI(), gradient_model="gpt-5-mini", apply_edit_model="gpt-4.1-mini",
                   val_batch_size=10, gradient_batch_size=4, beam_width=2, branch_factor=2, beam_rounds=2)
    trainer = agl.Trainer(n_runners=1, algorithm=algo,
                          initial_resources={"prompt_template": agl.PromptTemplate(template="...", engine="f-string")})
    trainer.fit(agent, train_dataset=train, val_dataset=val)
    algo.get_best_prompt()                       # also in apo-out/best_prompt.txt, and published as the resource

What is Agent Lightning's: the `PromptTemplate` resource and its arguments; rollouts run with each candidate as a
version of the resources (pinned per rollout); textual gradients (critiques) written from the rollouts' traces (the
messages their LLM calls recorded, their rewards, statuses and errors) and edits applying them, by any
OpenAI-compatible model (`AsyncOpenAI`/`OpenAI` client) or LiteLLM names (`use_litellm=True`); the best prompt
published at the end. What is GEPA's (the `gepa` package, `gepa.optimize`): the search itself: a Pareto frontier of
candidates over the validation tasks, a parent drawn among the `beam_width` best, a child kept only when it beats
its parent on the same minibatch of `gradient_batch_size` train tasks, then scored on the validation tasks. Agent
Lightning's beam (`beam_rounds` x `beam_width` x `branch_factor` children) sets the budget: that many proposals'
rollouts. Each rollout batch is a step of the run in the rollout view (`/ui`), labelled with its round, candidate
and role, and its page shows the prompt it ran with; the final full validation of the best prompt is the run's last
step. Every candidate (template, parent, round, critique, scores) goes to `output_dir/history.json`, the best
template to `output_dir/best_prompt.txt`.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lightning_otel.agent_api.resources import PromptTemplate
from lightning_otel.runtime.algorithm import Algorithm
from lightning_otel.runtime.sample_diagnosis import NothingTrained
from lightning_otel.runtime.training_run import TrainingRun
from lightning_otel.training.apo.chat_model import ChatModel
from lightning_otel.training.apo.evaluation import PromptEvaluator
from lightning_otel.training.apo.gepa_search import Candidate, SearchSettings, TraceGEPAAdapter
from lightning_otel.training.apo.options import APOOptions

log = logging.getLogger("lightning_otel.apo")


@dataclass(slots=True)
class APOResult:
    """The best prompt and its scores, the seed's, every candidate tried, the rollouts run, where it was saved."""

    best_prompt: PromptTemplate
    best_label: str
    best_val_score: float  # on the validation tasks the search compared candidates on
    seed_val_score: float | None
    final_val_score: float | None  # the best prompt on the whole validation set (None: not run)
    candidates: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0
    rollouts: int = 0
    output_dir: Path | None = None


class GEPALog:
    """GEPA's log lines into ours."""

    def log(self, message: str) -> None:
        log.info("gepa: %s", message)


class APO(Algorithm):
    """See the module docstring. The search's settings are `options` (`APOOptions`), or Agent Lightning's keywords
    for them (`gradient_model=`, `beam_width=`, ...); `use_litellm`: the models are LiteLLM names;
    `max_metric_calls` overrides the rollout budget the beam gives; `perfect_score`: a minibatch whose every reward
    reaches it is not critiqued, and the search stops once a candidate reaches it on every validation task (GEPA's
    skip and threshold; None: rewards have no ceiling); `output_dir` is where the best prompt and the history are
    written; `seed` GEPA's."""

    needs_message_content: ClassVar[bool] = True  # critiques read the conversations on the spans

    def __init__(
        self,
        async_openai_client: Any = None,
        *,
        options: APOOptions | None = None,
        use_litellm: bool = False,
        max_metric_calls: int | None = None,
        perfect_score: float | None = 1.0,
        output_dir: str | Path = "apo-out",
        seed: int = 0,
        **agent_lightning: Any,
    ) -> None:
        self.options = options = APOOptions.merged(options, agent_lightning)
        self.chat = ChatModel(async_openai_client, use_litellm=use_litellm)
        self.settings = SearchSettings(options.gradient_model, options.apply_edit_model, options.diversity_temperature)
        self.max_metric_calls, self.output_dir, self.seed = max_metric_calls, Path(output_dir), seed
        self.perfect_score = perfect_score
        self._best: PromptTemplate | None = None

    def get_best_prompt(self) -> PromptTemplate:
        if self._best is None:
            raise ValueError("No best prompt found: run the training first")
        return self._best

    def budget(self, val_tasks: int) -> int:
        """Rollouts for the beam's proposals: each runs its parent and itself on a minibatch, and is scored on the
        validation tasks if it wins; plus the seed's validation."""
        proposals = self.options.beam_rounds * self.options.beam_width * self.options.branch_factor
        return val_tasks + proposals * (2 * self.options.gradient_batch_size + val_tasks)

    def run(
        self, run: TrainingRun, train_dataset: Sequence[Any] | None, val_dataset: Sequence[Any] | None
    ) -> APOResult:
        import gepa
        from gepa.strategies.candidate_selector import TopKParetoCandidateSelector
        from gepa.utils.stop_condition import ScoreThresholdStopper

        if not train_dataset:
            raise ValueError("train_dataset is required for APO (its rollouts are what critiques read)")
        if not val_dataset:
            raise ValueError("val_dataset is required for APO (candidates are compared on it)")
        name, seed_prompt = self._seed(run)
        train, val = list(train_dataset), list(val_dataset)
        valset = val[: self.options.val_batch_size]
        evaluator = PromptEvaluator(run, name, seed_prompt, self.options.rollout_batch_timeout)
        adapter = TraceGEPAAdapter(evaluator, self.chat, self.settings, valset, seed_prompt.template)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        best: dict[str, Any] = {"candidate": adapter.candidate(seed_prompt.template)}

        def on_validation(candidate: Candidate) -> None:  # the best so far: published and saved as it changes
            current = best["candidate"]
            if current.val_score is None or (candidate.val_score or 0.0) > current.val_score:
                best["candidate"] = candidate
                self._save(adapter, candidate)

        adapter.on_validation = on_validation
        budget = self.max_metric_calls or self.budget(len(valset))
        log.info("APO: seed %r, %d train and %d validation tasks, a budget of %d rollouts", name, len(train),
                 len(valset), budget)  # fmt: skip
        selector = TopKParetoCandidateSelector(k=self.options.beam_width, rng=random.Random(self.seed))
        result = gepa.optimize(
            seed_candidate={name: seed_prompt.template}, trainset=train, valset=valset, adapter=adapter,
            candidate_selection_strategy=selector,
            reflection_minibatch_size=min(self.options.gradient_batch_size, len(train)), max_metric_calls=budget,
            skip_perfect_score=self.perfect_score is not None, perfect_score=self.perfect_score or 0.0,
            seed=self.seed, logger=GEPALog(), display_progress_bar=False,
            # every validation task at the perfect score: nothing left to find (the budget is not spent on it)
            stop_callbacks=[ScoreThresholdStopper(self.perfect_score)] if self.perfect_score is not None else None,
        )  # fmt: skip
        winner = adapter.candidate(result.best_candidate[name])
        seed = adapter.candidate(seed_prompt.template)
        if winner.val_score is None:
            raise NothingTrained("APO scored no candidate on the validation tasks (every rollout failed?)")
        if adapter.round and len(adapter.candidates) == 1:  # proposals made, none ran: nothing was searched
            self._save(adapter, seed)  # the refused edits, for the reader of the error
            self.chat.close()
            raise NothingTrained(self._nothing_searched(adapter, seed))
        final = None
        if self.options.run_initial_validation or len(val) > len(valset):  # the winner on the whole validation set
            reports = evaluator.evaluate(winner.template, val, mode="val",
                                         note=f"APO best prompt {winner.label} · full validation")  # fmt: skip
            final = sum(report.score for report in reports) / len(reports)
        self._best = PromptTemplate(template=winner.template, engine=seed_prompt.engine)
        run.update_resources({**evaluator.base, name: self._best})  # runners started later get the best prompt
        self._save(adapter, winner)
        outcome = APOResult(
            best_prompt=self._best, best_label=winner.label, best_val_score=float(winner.val_score),
            seed_val_score=seed.val_score, final_val_score=final,
            candidates=[c.json() for c in [*adapter.candidates.values(), *adapter.rejected]], rounds=adapter.round,
            rollouts=evaluator.rollouts, output_dir=self.output_dir,
        )  # fmt: skip
        log.info("APO: best %s %.3f (seed %.3f) after %d rounds, %d rollouts; saved in %s", winner.label,
                 winner.val_score, seed.val_score if seed.val_score is not None else math.nan, adapter.round,
                 evaluator.rollouts, self.output_dir)  # fmt: skip
        self.chat.close()
        return outcome

    def _nothing_searched(self, adapter: TraceGEPAAdapter, seed: Candidate) -> str:
        refused = adapter.rejected
        reason = f", e.g. {refused[0].rejected_because}" if refused else ""
        return (f"APO tried no prompt but the seed in {adapter.round} rounds: {len(refused)} edits by "
                f"{self.settings.apply_edit_model!r} were refused{reason}, the others repeated the seed; the seed "
                f"scored {seed.val_score:.3f} on validation. The edit model must return the whole template with its "
                f"placeholders {sorted(adapter.fields)}; its edits: {self.output_dir / 'history.json'}")  # fmt: skip

    def _seed(self, run: TrainingRun) -> tuple[str, PromptTemplate]:
        resources = run.latest_resources()
        for name, resource in resources.items():
            if isinstance(resource, PromptTemplate):
                return name, resource
        raise ValueError(
            "APO needs a PromptTemplate among the resources: Trainer(initial_resources={'prompt_template': "
            f"agl.PromptTemplate(template=..., engine='f-string')}}) (found: {sorted(resources) or 'none'})"
        )

    def _save(self, adapter: TraceGEPAAdapter, best: Candidate) -> None:
        (self.output_dir / "best_prompt.txt").write_text(best.template, encoding="utf-8")
        tried = [c.json() for c in [*adapter.candidates.values(), *adapter.rejected]]
        history = {"best": best.label, "candidates": tried}
        (self.output_dir / "history.json").write_text(json.dumps(history, indent=1), encoding="utf-8")
