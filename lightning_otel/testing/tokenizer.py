"""A real tokenizer built offline: byte-level BPE trained on a small shipped corpus, with a ChatML template.

Nothing is downloaded; training takes well under a second and is deterministic, so token ids are stable across
runs and machines. `save_pretrained(dir)` writes `tokenizer.json` + `tokenizer_config.json` (with the same
ChatML `chat_template`) that `transformers.AutoTokenizer.from_pretrained(dir)` loads.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END, TOOL_CALL_START, TOOL_CALL_END)

# The Jinja form of `ChatTokenizer.render_chat`, for transformers' apply_chat_template.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% if message.get('tool_calls') %}{% for call in message['tool_calls'] %}"
    "{{ '<tool_call>\\n' + (call['function'] | tojson) + '\\n</tool_call>' }}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(_field(part, "text") or "") for part in content)
    return str(content)


def render_tool_call(name: str, arguments: str) -> str:
    try:
        parsed_arguments: Any = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        parsed_arguments = arguments
    return f"{TOOL_CALL_START}\n{json.dumps({'name': name, 'arguments': parsed_arguments})}\n{TOOL_CALL_END}"


class ChatTokenizer:
    """Encode/decode text and ChatML conversations with a `tokenizers.Tokenizer`."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_token_id: int = tokenizer.token_to_id(IM_END)
        self.vocab_size: int = tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.id_to_token(token_id) or ""

    @staticmethod
    def render_message(message: Any) -> str:
        role = _field(message, "role") or "user"
        body = _text_of(_field(message, "content"))
        for call in _field(message, "tool_calls") or ():
            function = _field(call, "function")
            body += render_tool_call(str(_field(function, "name")), str(_field(function, "arguments") or ""))
        return f"{IM_START}{role}\n{body}{IM_END}\n"

    def render_chat(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> str:
        text = "".join(self.render_message(message) for message in messages)
        return text + f"{IM_START}assistant\n" if add_generation_prompt else text

    def encode_chat(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> list[int]:
        return self.encode(self.render_chat(messages, add_generation_prompt))

    def save_pretrained(self, directory: str | Path) -> Path:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(str(path / "tokenizer.json"))
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": None,
            "eos_token": IM_END,
            "pad_token": END_OF_TEXT,
            "unk_token": None,
            "model_max_length": 8192,
            "chat_template": CHAT_TEMPLATE,
            "additional_special_tokens": [IM_START, IM_END, TOOL_CALL_START, TOOL_CALL_END],
        }
        (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
        (path / "special_tokens_map.json").write_text(json.dumps({"eos_token": IM_END, "pad_token": END_OF_TEXT}))
        return path


@functools.lru_cache(maxsize=4)
def build_tokenizer(vocab_size: int = 1024) -> ChatTokenizer:
    """Train the tiny byte-level BPE on the shipped corpus (deterministic, offline, < 1 s)."""
    corpus = resources.files("lightning_otel.testing").joinpath("corpus.txt").read_text(encoding="utf-8")
    return train_tokenizer(corpus.splitlines() * 4, vocab_size=vocab_size)


# Words keep the space that follows them (GPT-2's pattern keeps the one before): "city Paris?" and "= 'Paris'" then
# share the token "Paris", so a tiny model copies a value from a question into SQL without learning a mapping.
_SPACE_AFTER_WORDS = r"[A-Za-z]+ ?|[0-9]+ ?|[^A-Za-z0-9\s]+ ?|\s+"


def train_tokenizer(lines: Iterable[str], *, vocab_size: int = 1024, space_after_words: bool = False) -> ChatTokenizer:
    """A byte-level BPE with the ChatML special tokens trained on `lines` (a task's own text gives short prompts:
    an example's schemas and questions become a few tokens each). Deterministic for the same lines.
    `space_after_words`: split text so a word carries the space after it, not before it (see above)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if space_after_words:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_SPACE_AFTER_WORDS), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(lines, trainer=trainer)
    return ChatTokenizer(tokenizer)
