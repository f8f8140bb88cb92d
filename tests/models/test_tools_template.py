"""SmolLM2's chat template with tools (lightning_otel/models/chatml_tools.jinja: the one `lightning-otel model smollm2`
gives its folder, and the calculator example's copy of a folder): without tools it renders what SmolLM2's original
template renders, token for token; with tools it lists them in the system turn, and an assistant
turn's calls render as the text the replica's hermes parser reads back into the same calls (so the next turn's
prompt holds the model's call as a model would have written it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from transformers import AutoTokenizer

from lightning_otel import semconv
from lightning_otel.serving.tool_parsers import parse_hermes
from tests.models.tool_agents import TOOLS as AGENT_TOOLS

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "calculator"))
from model_with_tools import with_tools_template  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "calculate", "description": "Evaluate an expression",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]  # fmt: skip


# SmolLM2-135M-Instruct's own template, as its GGUF file (and its Hugging Face release) have it: no tools
ORIGINAL_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_the_named_models_folder_has_the_template_that_renders_tools(smollm2_dir: Path) -> None:
    text = (smollm2_dir / "chat_template.jinja").read_text()
    assert text == (ROOT / "lightning_otel" / "models" / "chatml_tools.jinja").read_text()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    assert "# Tools" in tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=TOOLS, tokenize=False)


def test_the_template_adds_tools_and_changes_nothing_else(smollm2_dir: Path, tmp_path: Path) -> None:
    own = AutoTokenizer.from_pretrained(smollm2_dir)
    own.chat_template = ORIGINAL_TEMPLATE
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


def test_sft_examples_render_with_their_tools_to_the_ids_the_replica_sampled_from(smollm2_dir: Path,
                                                                                   tmp_path: Path) -> None:  # fmt: skip
    """What a warm start on a teacher's tool calls needs: each SFT example, through TRL's own rendering (Arrow rows,
    the tools as JSON text), is the prompt the model saw, token for token, tools and the call in the history too."""
    from datasets import Dataset

    import lightning_otel as agl
    from lightning_otel.adapters.messages import call_messages, call_tools
    from lightning_otel.serving.cpu_replica import serve_folder
    from lightning_otel.training.sft import prompt_completion

    folder = with_tools_template(smollm2_dir, tmp_path)
    tasks = [{"task_id": f"t{i}", "question": f"What is {a} * 3?", "expression": f"{a} * 3", "result": str(3 * a)}
             for i, a in enumerate((17, 41))]  # fmt: skip
    with serve_folder(folder) as base_url:
        trainer = agl.Trainer(
            n_runners=1,
            adapter={"agent_match": None},
            initial_resources={"main_llm": agl.LLM(base_url, "agl-policy")},
            runner_options=agl.RunnerOptions(capture_content=True),
        )
        result = trainer.dev("tests.models.tool_agents:tool_turns_agent", tasks, gateway=True, print_spans=False)
    rows, sampled = [], []
    for batch in result.train:
        for spans in batch.spans.values():
            for span in spans:
                attributes = span["attributes"]
                if semconv.AGL_PROMPT_TOKEN_IDS not in attributes or semconv.GEN_AI_INPUT_MESSAGES not in attributes:
                    continue  # the gateway's copy records no content; the client's does
                inputs, reply = call_messages(span)
                rows.append(prompt_completion({"messages": [*inputs, reply], "tools": call_tools(span)}))
                sampled.append(list(attributes[semconv.AGL_PROMPT_TOKEN_IDS]))
    assert len(rows) == 4 and all(json.loads(row["tools"]) == AGENT_TOOLS for row in rows)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    for row, prompt_ids in zip(Dataset.from_list(rows).to_list(), sampled, strict=True):  # as TRL's dataset has them
        rendered = tokenizer.apply_chat_template(row["prompt"], tools=json.loads(row["tools"]), return_dict=False,
                                                 add_generation_prompt=True, tokenize=True)  # TRL's call  # fmt: skip
        assert list(rendered) == prompt_ids
    # the second call of each rollout: the call and the tool's answer in the history
    assert sum("<tool_response>" in tokenizer.decode(ids) for ids in sampled) == 2
