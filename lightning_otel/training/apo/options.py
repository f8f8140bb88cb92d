"""`APOOptions`: the search's settings as one value, named as Agent Lightning's `APO` names its arguments.

agl.APO(client, options=agl.APOOptions(beam_width=2, beam_rounds=2))
agl.APO(client, beam_width=2, beam_rounds=2)      # Agent Lightning's spelling: the same options, no warning
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class APOOptions:
    """`gradient_model` writes the critiques, `apply_edit_model` the edits, at `diversity_temperature`; each
    proposal's parent and child run on `gradient_batch_size` train tasks, winners on `val_batch_size` validation
    tasks; the beam (`beam_rounds` x `beam_width` x `branch_factor` proposals) sets the rollout budget;
    `rollout_batch_timeout` (s) bounds one batch of rollouts; `run_initial_validation`: score the best prompt on the
    whole validation set at the end."""

    gradient_model: str = "gpt-5-mini"
    apply_edit_model: str = "gpt-4.1-mini"
    diversity_temperature: float = 1.0
    gradient_batch_size: int = 4
    val_batch_size: int = 16
    beam_width: int = 4
    branch_factor: int = 4
    beam_rounds: int = 3
    rollout_batch_timeout: float = 3600.0
    run_initial_validation: bool = True

    def __post_init__(self) -> None:
        for name in ("gradient_batch_size", "val_batch_size", "beam_width", "branch_factor", "beam_rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def merged(cls, options: APOOptions | None, keywords: dict[str, Any]) -> APOOptions:
        """`options` (defaults where None) with Agent Lightning's keywords applied; a keyword that is none of
        its fields is a TypeError, and so is one `options` also sets."""
        names = {item.name for item in fields(cls)}
        unknown = sorted(set(keywords) - names)
        if unknown:
            raise TypeError(f"APO() got unexpected keyword arguments {unknown}")
        base = options or cls()
        if options is not None:
            twice = sorted(name for name in keywords if getattr(options, name) != getattr(cls(), name))
            if twice:
                raise TypeError(f"APO got {twice} both as keywords and in options=: pass each once")
        return replace(base, **keywords)


__all__ = ["APOOptions"]
