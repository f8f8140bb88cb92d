"""The search, GEPA's (`gepa.optimize`): candidates kept on a Pareto frontier over the validation tasks, a parent
drawn among the `beam_width` best of it, run on a minibatch of train tasks with its traces captured, a child
proposed, kept when it beats its parent on that minibatch, then scored on the validation tasks. What this adapter
supplies is ours and Agent Lightning's: running a candidate is a batch of rollouts on the Trainer's runners with
the candidate as a resources version (`PromptEvaluator`), and proposing a child is Agent Lightning's textual
gradient + edit, written from the rollouts' traces (`critique`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_otel.training.apo.chat_model import ChatModel
from lightning_otel.training.apo.critique import RolloutReport, apply_edit, placeholders, textual_gradient
from lightning_otel.training.apo.evaluation import PromptEvaluator

log = logging.getLogger("lightning_otel.apo")


@dataclass(slots=True)
class Candidate:
    """A prompt the search tried: its label (p0 is the seed), parent, the round that proposed it, its scores."""

    label: str
    template: str
    parent: str | None
    round: int
    critique: str | None = None
    minibatch_scores: list[float] = field(default_factory=list)
    val_score: float | None = None
    rejected_because: str | None = None  # an edit that broke the template's placeholders

    def json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]


@dataclass(slots=True)
class SearchSettings:
    gradient_model: str
    apply_edit_model: str
    temperature: float


class TraceGEPAAdapter:
    """`gepa.GEPAAdapter` over the Trainer's runners: `evaluate` runs rollouts, `make_reflective_dataset` keeps
    their reports, `propose_new_texts` critiques and edits."""

    def __init__(
        self,
        evaluator: PromptEvaluator,
        chat: ChatModel,
        settings: SearchSettings,
        valset: Sequence[Any],
        seed_template: str,
    ) -> None:
        self.evaluator, self.chat, self.settings = evaluator, chat, settings
        self.valset_ids = sorted(id(task) for task in valset)
        self.fields = placeholders(seed_template)
        self.candidates: dict[str, Candidate] = {seed_template: Candidate("p0", seed_template, None, 0)}
        self.rejected: list[Candidate] = []  # edits not tried (a broken template), kept for the history
        self.round = 0
        self._last_minibatch: tuple[str, list[int], Any] | None = None  # template, task ids, its EvaluationBatch
        self.on_validation: Any = None  # (candidate) -> None, after a candidate's score on the validation tasks

    def candidate(self, template: str) -> Candidate:
        return self.candidates[template]

    def evaluate(self, batch: list[Any], candidate: dict[str, str], capture_traces: bool = False) -> Any:
        from gepa import EvaluationBatch

        (template,) = candidate.values()
        ids = [id(task) for task in batch]
        if self._last_minibatch is not None and self._last_minibatch[:2] == (template, ids):
            # a rejected edit kept its parent: the same template on the minibatch it just ran scores as it did
            # (GEPA keeps a child only if it beats its parent there), so its rollouts are not run again
            log.info("APO round %d: the unchanged template's minibatch scores reused", self.round)
            return self._last_minibatch[2]
        known = self.candidates.setdefault(template, Candidate(f"p{len(self.candidates)}", template, None, self.round))
        on_valset = sorted(ids) == self.valset_ids
        if on_valset:
            note, mode = f"APO round {self.round} · {known.label} · validation", "val"
        else:
            # a child on the minibatch its parent ran (the comparison), or a parent whose traces the critique reads
            against_parent = known.parent is not None and known.round == self.round
            role = "minibatch, against its parent" if against_parent else "minibatch, traces for a critique"
            note, mode = f"APO round {self.round} · {known.label} · {role}", "train"
        reports = self.evaluator.evaluate(template, batch, mode=mode, note=note)
        scores = [report.score for report in reports]
        if on_valset:
            known.val_score = sum(scores) / len(scores) if scores else 0.0
            log.info("%s: %.3f on %d validation tasks", known.label, known.val_score, len(scores))
            if self.on_validation is not None:
                self.on_validation(known)
            return EvaluationBatch(outputs=reports, scores=scores, trajectories=reports if capture_traces else None)
        known.minibatch_scores.append(sum(scores) / len(scores) if scores else 0.0)
        evaluated = EvaluationBatch(outputs=reports, scores=scores, trajectories=reports)
        self._last_minibatch = (template, ids, evaluated)
        return evaluated

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: Any, components_to_update: list[str]
    ) -> dict[str, list[dict[str, Any]]]:
        reports = eval_batch.trajectories or []
        return {name: [{"report": report} for report in reports] for name in components_to_update}

    def propose_new_texts(
        self,
        candidate: dict[str, str],
        reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
        components_to_update: list[str],
    ) -> dict[str, str]:
        self.round += 1
        proposed = {}
        for name in components_to_update:
            template = candidate[name]
            parent = self.candidates[template]
            reports: list[RolloutReport] = [row["report"] for row in reflective_dataset.get(name, [])]
            critique = textual_gradient(self.chat, self.settings.gradient_model, template, reports,
                                        self.settings.temperature)  # fmt: skip
            edited = apply_edit(self.chat, self.settings.apply_edit_model, template, critique,
                                self.settings.temperature)  # fmt: skip
            why = None
            if not edited.strip():
                why = "the edit model returned nothing"
            elif placeholders(edited) != self.fields:
                why = f"its placeholders {sorted(placeholders(edited))} are not the seed's {sorted(self.fields)}"
            if why is not None:  # keep the parent: an identical child cannot beat it, so the search moves on
                log.warning("APO round %d: edit of %s rejected: %s", self.round, parent.label, why)
                self.rejected.append(Candidate(f"r{len(self.rejected) + 1}", edited, parent.label, self.round, critique,
                                               rejected_because=why))  # fmt: skip
                proposed[name] = template
                continue
            child = self.candidates.setdefault(
                edited, Candidate(f"p{len(self.candidates)}", edited, parent.label, self.round, critique)
            )
            log.info("APO round %d: %s proposed from %s", self.round, child.label, parent.label)
            proposed[name] = edited
        return proposed
