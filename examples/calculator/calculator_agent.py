"""A LangGraph ReAct agent that must use its calculator: arithmetic word problems a small model cannot work out in its
head (products of two-digit numbers, sums of three-digit ones), generated here from a seed.

The agent is LangGraph's prebuilt `create_react_agent` with one tool, `calculate`; nothing in it knows about
training. The policy's tool calls are read from its own text by the replica's `hermes` parser (as vLLM's
`--tool-call-parser hermes` reads them) and its tools reach it through the model's chat template. In the traces its
calls are the agent `agent` (LangGraph's node name), the tool runs are the `tools` node's.

Reward: 1.0 when the last number of the final reply is the answer, else 0.0. Each episode's record (did it call the
tool, did a call stay unparsed in the text, was the answer right) goes to `task["record_file"]` when the task names one.
"""

from __future__ import annotations

import ast
import json
import operator
import random
import re
from typing import Any

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

import lightning_otel as agl

SYSTEM = "Solve the problem. Call the calculate tool for the arithmetic, then answer with the final number."
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
TEMPLATES = (
    ("{name} packs {a} boxes with {b} pencils in each box. How many pencils is that?", operator.mul),
    ("A theatre has {a} rows of {b} seats. How many seats does it have?", operator.mul),
    ("{name} has {a} stamps and is given {b} more. How many stamps does {name} have now?", operator.add),
    ("A farm grows {a} apple trees and {b} pear trees. How many trees is that in all?", operator.add),
    ("{name} had {a} marbles and lost {b} of them. How many marbles are left?", operator.sub),
)
NAMES = ("Sara", "Omar", "Lena", "Kofi", "Mei", "Ivan")
_SIGNS = {operator.mul: "*", operator.add: "+", operator.sub: "-"}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("only numbers, + - * / and parentheses")


@tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses, such as 17 * 24 or (120 + 35) - 8."""
    try:
        value = _evaluate(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        return f"error: {exc}"
    return str(int(value) if float(value).is_integer() else round(value, 6))


def word_problems(count: int, seed: int) -> list[dict[str, Any]]:
    """`count` problems drawn from the templates with the seed: the question, its integer answer, and the expression
    that computes it (a self-distilling teacher's context can name it; the agent never sees it)."""
    draw = random.Random(seed)
    problems = []
    for index in range(count):
        text, combine = draw.choice(TEMPLATES)
        if combine is operator.mul:
            a, b = draw.randint(12, 49), draw.randint(12, 49)
        else:
            a, b = draw.randint(120, 899), draw.randint(101, 119)
        question = text.format(name=draw.choice(NAMES), a=a, b=b)
        problems.append({"task_id": f"problem-{seed}-{index}", "question": question, "answer": combine(a, b),
                         "expression": f"{a} {_SIGNS[combine]} {b}"})  # fmt: skip
    return problems


def arithmetic_drills(count: int, seed: int) -> list[dict[str, Any]]:
    """`count` bare sums, differences and products ("What is 23 * 17?") of the word problems' sizes: the warm start's
    questions, which show the tool call's format without the word problems' step from words to an expression."""
    draw = random.Random(seed)
    drills = []
    for index in range(count):
        sign = draw.choice("*+-")
        if sign == "*":
            a, b = draw.randint(12, 49), draw.randint(12, 49)
        else:
            a, b = draw.randint(120, 899), draw.randint(101, 119)
        answer = a * b if sign == "*" else a + b if sign == "+" else a - b
        drills.append({"task_id": f"drill-{seed}-{index}", "question": f"What is {a} {sign} {b}?", "answer": answer})
    return drills


def final_number(text: str) -> float | None:
    """The last number in the reply (commas in thousands dropped), or None."""
    numbers = _NUMBER.findall(text.replace(",", ""))
    return float(numbers[-1]) if numbers else None


def solve(model: ChatOpenAI, question: str) -> tuple[str, list[Any]]:
    """Run the agent on one question: its final reply and every message of the run."""
    agent = create_react_agent(model, [calculate], prompt=SYSTEM)
    result = agent.invoke({"messages": [("user", question)]}, {"recursion_limit": 6})
    return str(result["messages"][-1].content), result["messages"]


@agl.rollout
def calculator_rollout(task: dict[str, Any], llm: agl.LLM) -> float:
    """One problem: 1.0 when the agent's final number is the answer."""
    model = ChatOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", model=llm.model, max_retries=2)
    try:
        reply, messages = solve(model, task["question"])
    except Exception as exc:  # LangGraph's recursion limit: the policy kept calling; a policy failure, reward 0
        if type(exc).__name__ != "GraphRecursionError":
            raise
        reply, messages = "", []
    calls = [call for message in messages for call in getattr(message, "tool_calls", None) or []]
    reward = float(final_number(reply) == task["answer"])
    if task.get("record_file"):
        record = {
            "task": task["task_id"],
            "tool_calls": len(calls),
            "expressions": [str((call.get("args") or {}).get("expression"))[:80] for call in calls],
            "reward": reward,
            "reply": reply[:200],
            "unparsed_call": "<tool_call>" in reply,  # a call the parser could not read stays in the text
            "no_number": final_number(reply) is None,
        }
        with open(task["record_file"], "a") as out:
            out.write(json.dumps(record) + "\n")
    return reward
