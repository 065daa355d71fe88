"""grpo.environment {kind: builtin, name: calculator}: a tool the policy may call before it answers.

    policy       <calc>37*48</calc>            (the turn stops at </calc>)
    environment  <result>1776</result>
    policy       1776<eos>                     (a turn without a call is the final answer)

The reward is 1 when the final answer's leading integer is the row's `answer` (components: correct), else 0. A call
whose expression does not parse is answered `<result>error</result>` (the policy may try again) and counted as an
error with its reason; a call left open (`<calc>` without `</calc>`) ends the episode with 0. builtin:calculator's
rows (products of 2-digit numbers) and builtin:arithmetic's both carry the answer.
"""

from __future__ import annotations

import ast
import operator
import re

from trainer_core.data.tasks.calculator import result
from trainer_core.environments.base import Episode, Reply, answer, end

OPEN, CLOSE = "<calc>", "</calc>"
_LONGEST = 64  # characters of an expression
_LARGEST = 10**15  # magnitude of any value along the way: no 9**9**9 that eats the trainer's memory
_ANSWER = re.compile(r"^\s*(-?\d+)(?![\d.])")
_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


class ExpressionError(ValueError):
    pass


def calculate(expression: str) -> int | float:
    """The value of an arithmetic expression of numbers, + - * / // %, unary minus and parentheses; anything else
    (names, calls, powers, values past 1e15) is an ExpressionError."""
    if len(expression) > _LONGEST:
        raise ExpressionError(f"longer than {_LONGEST} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ExpressionError("not an arithmetic expression") from None
    return _value(tree.body)


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value = node.value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = -_value(node.operand) if isinstance(node.op, ast.USub) else _value(node.operand)
    elif isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left), _value(node.right)
        try:
            value = _OPERATORS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExpressionError("division by zero") from None
    else:
        what = type(node.op if isinstance(node, ast.BinOp | ast.UnaryOp) else node).__name__
        raise ExpressionError(f"{what} is not allowed (numbers and + - * / // % only)")
    if abs(value) > _LARGEST:
        raise ExpressionError("a value past 1e15")
    return value


def shown(value: int | float) -> str:
    """An exact value as an integer, another rounded to 6 places."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) if isinstance(value, int) else f"{value:.6g}"


def final_answer(text: str) -> int | None:
    match = _ANSWER.match(text)
    return int(match.group(1)) if match else None


class Calculator:
    stop = (CLOSE,)

    def reset(self, episode: Episode) -> str:
        return ""

    def step(self, episode: Episode, message: str) -> Reply:
        start = message.rfind(OPEN)
        if start >= 0:
            close = message.find(CLOSE, start)
            if close < 0:
                return end(0.0, components={"correct": 0.0}, reason=f"a {OPEN} call left open", error=True)
            expression = message[start + len(OPEN) : close]
            try:
                return answer(result(shown(calculate(expression))), tool_call=True)
            except ExpressionError as exc:
                return answer(result("error"), tool_call=True, error=True, reason=f"malformed call {expression!r}: {exc}")
        expected = episode.row.get("answer")
        if expected is None:
            return end(0.0, components={"correct": 0.0}, reason="the row has no answer column to check against", error=True)
        given = final_answer(message)
        correct = float(given is not None and given == int(str(expected).strip()))
        return end(correct, components={"correct": correct}, reason=None if given is not None else "no number in the answer")

    def cut_off(self, episode: Episode, why: str) -> Reply:
        return end(0.0, components={"correct": 0.0}, reason=f"cut off by {why} after {episode.turns} turns")

    def close(self) -> None:
        pass
