"""The self-distillation teacher as a FrozenLake policy: what `benchmarks.frozen_lake --teacher-check N` prints.

Self-distillation pulls the student toward what its teacher would say, so the teacher should be the better policy:
here the student's model with the privileged context (a shortest safe path from the square) as a system turn before
its prompt, exactly as the loop's teacher reads it. Both sample N replies from each square, as the agent's first turn
(temperature 1, no top-k, 8 tokens); a reply is scored by the first move it names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def first_turn_replies(model_dir: Path, squares: list[int], samples: int, seed: int, *, context: str) -> dict[str, Any]:
    """`samples` replies from each square without the teacher's context and with it (`context`, a template of
    `{path}`): the share naming a move, and naming the shortest path's first move."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.frozen_lake import MOVES, RULES, board, lake_rows, move_of, shortest_path
    from lightning_otel.serving.sampler_api import HFChatTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    chat = HFChatTokenizer(tokenizer)  # the replica's rendering, and the loop's teacher's (`teacher_context_ids`)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = lake_rows()
    shares: dict[str, Any] = {"samples": samples * len(squares)}
    for who in ("student", "teacher"):
        torch.manual_seed(seed)
        named = first = 0
        for square in squares:
            path = shortest_path(rows, square)
            turns = [{"role": "system", "content": RULES}, {"role": "user", "content": board(rows, square)}]
            prompt = chat.encode(chat.render_chat(turns))
            if who == "teacher":  # the loop's teacher: the context's ids as a system turn before the prompt's
                privileged = [{"role": "system", "content": context.format(path=", ".join(path))}]
                prompt = chat.encode(chat.render_chat(privileged, add_generation_prompt=False)) + prompt
            ids = torch.tensor([prompt] * samples)
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0,
                                     top_p=1.0, max_new_tokens=8, pad_token_id=tokenizer.eos_token_id)  # fmt: skip
            for row in out[:, ids.shape[1] :]:
                move = move_of(tokenizer.decode(row, skip_special_tokens=True))
                named += move is not None
                first += move is not None and MOVES[move] == path[0]
        shares[who] = {
            "names_a_move": named / shares["samples"],
            "names_the_paths_first_move": first / shares["samples"],
        }
    return shares


def teacher_check_lines(shares: dict[str, Any]) -> list[str]:
    """What the check printed: a line each for the student and the teacher."""
    return [
        f"teacher check, {who} ({shares['samples']} first-turn replies): names a move "
        f"{shares[who]['names_a_move']:.2f}, the shortest path's first move "
        f"{shares[who]['names_the_paths_first_move']:.2f}"
        for who in ("student", "teacher")
    ]
