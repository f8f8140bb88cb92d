"""Token ids as text, for people: the rollout view decodes a call's prompt and response ids with the policy's
tokenizer when the collector was given one (`--tokenizer DIR_OR_FILE`: a Hugging Face tokenizer folder or its
`tokenizer.json`). The `tokenizers` package is optional; without it, or without a tokenizer, the view shows ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class TokenizerUnavailable(RuntimeError):
    """The tokenizer named on the command line cannot be loaded."""


class TokenText:
    """One tokenizer, loaded once; `pieces(ids)` gives the text of each id (decoded alone, so spaces show)."""

    def __init__(self, path: str | Path) -> None:
        file = Path(path)
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise TokenizerUnavailable(f"no tokenizer at {path} (expected a tokenizer.json or a folder with one)")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TokenizerUnavailable("decoding token ids needs the `tokenizers` package") from None
        try:
            self._tokenizer: Any = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises a bare Exception on malformed files
            raise TokenizerUnavailable(f"cannot load the tokenizer {file}: {exc}") from None
        self.path = str(file)
        # what the view says it decodes with: the path as given (`agl-demo/model`); an absolute one by its last two
        # parts, so a page (or its screenshot) shows no machine's folders
        given = Path(path)
        self.label = str(given) if not given.is_absolute() else "…/" + "/".join(given.parts[-2:])
        self._cache: dict[int, str] = {}

    def pieces(self, ids: list[int]) -> list[str]:
        out = []
        for token_id in ids:
            piece = self._cache.get(token_id)
            if piece is None:
                piece = self._cache[token_id] = self._tokenizer.decode([token_id], skip_special_tokens=False)
            out.append(piece)
        return out
