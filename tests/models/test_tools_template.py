"""The calculator example's chat template (examples/calculator/chatml_tools.jinja) on SmolLM2: without tools it renders
what SmolLM2's own template renders, token for token; with tools it lists them in the system turn, and an assistant
turn's calls render as the text the replica's hermes parser reads back into the same calls (so the next turn's
prompt holds the model's call as a model would have written it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from transformers import AutoTokenizer

from lightning_otel.serving.tool_parsers import parse_hermes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "calculator"))
from model_with_tools import with_tools_template  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "calculate", "description": "Evaluate an expression",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]  # fmt: skip


def test_the_template_adds_tools_and_changes_nothing_else(smollm2_dir: Path, tmp_path: Path) -> None:
    own = AutoTokenizer.from_pretrained(smollm2_dir)
    tools = AutoTokenizer.from_pretrained(with_tools_template(smollm2_dir, tmp_path))
    assert (smollm2_dir / "model.safetensors").resolve() == (tmp_path / f"{smollm2_dir.name}-tools" /
                                                             "model.safetensors").resolve()  # fmt: skip
    chats = ([{"role": "user", "content": "hi"}],
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
              {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2 + 2?"}])  # fmt: skip
    for chat in chats:
        assert tools.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == \
            own.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)  # fmt: skip

    call = {"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "17 * 24"}'}}
    chat = [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": "17 * 24?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "408"}]  # fmt: skip
    text = tools.apply_chat_template(chat, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nUse the tool.\n\n# Tools\n")
    assert json.dumps(TOOLS[0]) in text and text.count("<|im_start|>system") == 1
    assistant = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    parsed = parse_hermes(assistant)
    assert parsed.content is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls] == [
        ("calculate", {"expression": "17 * 24"})
    ]
    assert "<|im_start|>user\n<tool_response>\n408\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text
