"""builtin:arithmetic - small sums and products ("12+7=" -> "19", "3*4=" -> "12"); builtin:arithmetic-graded - the
same problems answered right and wrong, graded with SteerLM's attributes (builtin:arithmetic-partly-graded: a quarter of
the rows ungraded).

A problem is one expression. The seed picks which problems are used and which are held out
for evaluation; every row of a held-out problem is in eval, so the model is never scored on a
problem it trained on. The reward checks the number a response starts with.
"""

from __future__ import annotations

import re

from trainer_core.data.split import Split, seeded_rng, split_by_key

SUM_MAX = 49  # operands of sums: 0..49
PRODUCT_MAX = 12  # operands of products: 0..12 (the times table)
DEFAULT_SIZE = 2669  # problems per call: the whole space

_PROBLEM = re.compile(r"^\s*(\d+)\s*([+*])\s*(\d+)\s*=\s*$")
# The leading integer of a response, not part of a longer number or a decimal ("19 ", "19<eos>", "19\n3+4=").
_ANSWER = re.compile(r"^\s*(-?\d+)(?!\.?\d)")


def all_problems() -> list[str]:
    sums = [f"{a}+{b}=" for a in range(SUM_MAX + 1) for b in range(SUM_MAX + 1)]
    products = [f"{a}*{b}=" for a in range(PRODUCT_MAX + 1) for b in range(PRODUCT_MAX + 1)]
    return sums + products


def solve(prompt: str) -> int:
    """The answer to an "a+b=" or "a*b=" prompt."""
    match = _PROBLEM.match(prompt)
    if not match:
        raise ValueError(f"{prompt!r} is not an arithmetic prompt like '12+7=' or '3*4='")
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    return a + b if op == "+" else a * b


def problems(seed: int, size: int = DEFAULT_SIZE) -> list[str]:
    """`size` distinct problems in a seeded order."""
    pool = all_problems()
    seeded_rng(seed, "arithmetic").shuffle(pool)
    return pool[:size]


def wrong_answer(prompt: str, rng) -> int:
    """A plausible mistake: off by ten, digits swapped, or the other operation.

    Not off by one: telling 19 from 18 needs the units digit of the sum, which a reward model of
    builtin size does not learn from pairwise labels in a test's time (measured: such pairs stay
    at chance while the rest reach 0.95), and a test must be able to show that the recipe learns.
    """
    right = solve(prompt)
    a, op, b = _PROBLEM.match(prompt).groups()
    other = int(a) * int(b) if op == "+" else int(a) + int(b)
    candidates = {right + 10, right - 10, other}
    if len(str(right)) > 1:
        candidates.add(int(str(right)[::-1]))
    return rng.choice(sorted(c for c in candidates if c != right and c >= 0))


def _split(rows: list[dict], seed: int, eval_fraction: float) -> Split:
    return split_by_key(rows, lambda row: row["prompt"], eval_fraction, seed)


def sft_examples(*, seed: int = 0, eval_fraction: float = 0.1, size: int = DEFAULT_SIZE) -> Split:
    rows = [{"prompt": p, "completion": str(solve(p))} for p in problems(seed, size)]
    return _split(rows, seed, eval_fraction)


def graded_examples(*, seed: int = 0, eval_fraction: float = 0.1, size: int = DEFAULT_SIZE) -> Split:
    """builtin:arithmetic-graded, SteerLM's kind of rows (HelpSteer's shape): each problem twice, answered right and
    answered wrong, with the attributes correctness (4 right, 0 wrong) and verbosity (the answer's digits)."""
    rng = seeded_rng(seed, "arithmetic-graded")
    rows = []
    for p in problems(seed, size):
        for answer, correctness in ((solve(p), 4), (wrong_answer(p, rng), 0)):
            rows.append({"prompt": p, "completion": str(answer), "correctness": correctness, "verbosity": len(str(answer))})
    return _split(rows, seed, eval_fraction)


def partly_graded_examples(*, seed: int = 0, eval_fraction: float = 0.1, size: int = DEFAULT_SIZE) -> Split:
    """builtin:arithmetic-partly-graded: graded_examples with a seeded quarter of the rows missing correctness, as SFT
    data mixes labelled rows with unlabelled ones (a conditioned SFT run's labeller fills them)."""
    split = graded_examples(seed=seed, eval_fraction=eval_fraction, size=size)
    for rows in (split.train, split.eval):
        for i in seeded_rng(seed, "arithmetic-unlabelled").sample(range(len(rows)), len(rows) // 4):
            del rows[i]["correctness"]
    return split


def preference_examples(*, seed: int = 0, eval_fraction: float = 0.1, size: int = DEFAULT_SIZE) -> Split:
    rng = seeded_rng(seed, "arithmetic-rejected")
    rows = [{"prompt": p, "chosen": str(solve(p)), "rejected": str(wrong_answer(p, rng))} for p in problems(seed, size)]
    return _split(rows, seed, eval_fraction)


def prompt_examples(*, seed: int = 0, eval_fraction: float = 0.1, size: int = DEFAULT_SIZE) -> Split:
    rows = [{"prompt": p, "answer": str(solve(p))} for p in problems(seed, size)]
    return _split(rows, seed, eval_fraction)


def reward(prompt: str, response: str, answer: str | int | None = None) -> float:
    """1.0 when the response starts with the right number (whitespace and trailing text allowed), else 0.0.

    `answer` comes from the prompt row; without it the prompt is solved.
    """
    match = _ANSWER.match(response)
    if match is None:
        return 0.0
    expected = int(str(answer).strip()) if answer is not None else solve(prompt)
    return 1.0 if int(match.group(1)) == expected else 0.0
