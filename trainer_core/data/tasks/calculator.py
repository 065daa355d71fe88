"""builtin:calculator - products of two 2-digit numbers ("37*48=" -> "1776"), with a calculator to call.

Too hard for a tiny model to work out, easy with the tool: the policy may write `<calc>37*48</calc>`, the
calculator environment (trainer_core/environments/calculator.py) answers `<result>1776</result>`, and the
policy then gives its final answer. The sft rows show the call on half of the problems (TOOL_SHARE) and a bare
answer on the rest, so a model trained on them calls the tool only some of the time: learning when calling pays
is left to RL. Prompt rows carry the answer the environment checks. Held-out problems are never trained on.
"""

from __future__ import annotations

from trainer_core.data.split import Split, seeded_rng, split_by_key

LOW, HIGH = 10, 99  # the operands
TOOL_SHARE = 0.2  # sft rows that call the calculator


def problems(seed: int) -> list[tuple[int, int]]:
    """Every (a, b) in a seeded order."""
    pool = [(a, b) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)]
    seeded_rng(seed, "calculator").shuffle(pool)
    return pool


def prompt(a: int, b: int) -> str:
    return f"{a}*{b}="


def call(expression: str) -> str:
    return f"<calc>{expression}</calc>"


def result(value: str) -> str:
    return f"<result>{value}</result>"


def tool_completion(a: int, b: int) -> str:
    """The whole episode after the prompt as an sft completion: the call, the calculator's answer, the final answer."""
    return call(f"{a}*{b}") + result(str(a * b)) + str(a * b)


def _split(rows: list[dict], seed: int, eval_fraction: float) -> Split:
    return split_by_key(rows, lambda row: row["prompt"], eval_fraction, seed)


def sft_examples(*, seed: int = 0, eval_fraction: float = 0.1) -> Split:
    rng = seeded_rng(seed, "calculator-tool")
    rows = [
        {"prompt": prompt(a, b), "completion": tool_completion(a, b) if rng.random() < TOOL_SHARE else str(a * b)}
        for a, b in problems(seed)
    ]
    return _split(rows, seed, eval_fraction)


def prompt_examples(*, seed: int = 0, eval_fraction: float = 0.1) -> Split:
    rows = [{"prompt": prompt(a, b), "answer": str(a * b)} for a, b in problems(seed)]
    return _split(rows, seed, eval_fraction)
