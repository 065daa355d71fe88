"""builtin:randomwalks - trlx's toy RL task: walk a random directed graph to the goal node.

The graph has N nodes named by letters ("a", "b", ...) and is drawn once from a fixed graph
seed, so the data and the reward always agree on it; node "a" is the goal. A prompt is a start
node ("f"); a response continues the path with node letters ("kda"). The reward is the path's
optimality: the shortest distance from the start to the goal divided by the length of the
walk, so a shortest path scores 1.0, a longer one less, and a path that uses a missing edge,
names a node that does not exist or never reaches the goal scores 0.0.

The run's seed picks the sampled walks, their order and which start nodes are held out for
evaluation (every row of a held-out start is in eval).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cache

from trainer_core.data.split import Split, seeded_rng, shuffled, split_by_key

LETTERS = "abcdefghijklmnopqrstuvwxyz"
GOAL = 0


@dataclass(frozen=True)
class WalkGraph:
    """Out-edges of every node, and each node's shortest distance (in edges) to the goal."""

    edges: tuple[frozenset[int], ...]
    distance: tuple[int, ...]

    @property
    def starts(self) -> list[int]:
        return [node for node in range(len(self.edges)) if node != GOAL]

    def optimal_path(self, start: int) -> list[int]:
        """A shortest path from start to the goal, start included; the lowest-lettered step on ties."""
        path = [start]
        while path[-1] != GOAL:
            here = path[-1]
            path.append(min(n for n in self.edges[here] if self.distance[n] == self.distance[here] - 1))
        return path

    def random_walk(self, start: int, rng, max_length: int) -> list[int]:
        """Random steps from start until the goal or max_length edges, start included."""
        path = [start]
        while path[-1] != GOAL and len(path) <= max_length:
            path.append(rng.choice(sorted(self.edges[path[-1]])))
        return path


def _distances(edges: list[set[int]]) -> list[int | None]:
    """Breadth-first search backwards from the goal."""
    incoming: list[list[int]] = [[] for _ in edges]
    for node, outs in enumerate(edges):
        for target in outs:
            incoming[target].append(node)
    distance: list[int | None] = [None] * len(edges)
    distance[GOAL] = 0
    queue = deque([GOAL])
    while queue:
        node = queue.popleft()
        for previous in incoming[node]:
            if distance[previous] is None:
                distance[previous] = distance[node] + 1
                queue.append(previous)
    return distance


@cache
def make_graph(n_nodes: int = 21, p_edge: float = 0.1, graph_seed: int = 1002) -> WalkGraph:
    """A random directed graph where every node can reach the goal (an edge is added where one cannot)."""
    if not 2 <= n_nodes <= len(LETTERS):
        raise ValueError(f"n_nodes must be between 2 and {len(LETTERS)}, got {n_nodes}")
    rng = seeded_rng(graph_seed, "randomwalks-graph")
    edges = [{j for j in range(n_nodes) if j != i and rng.random() < p_edge} if i != GOAL else set() for i in range(n_nodes)]
    distance = _distances(edges)
    while None in distance:
        stranded = distance.index(None)
        edges[stranded].add(rng.choice([n for n, d in enumerate(distance) if d is not None]))
        distance = _distances(edges)
    return WalkGraph(edges=tuple(frozenset(e) for e in edges), distance=tuple(distance))


def letters(path: list[int]) -> str:
    return "".join(LETTERS[node] for node in path)


def parse_path(graph: WalkGraph, prompt: str, response: str) -> list[int] | None:
    """The walk a (prompt, response) describes, start included, cut at the goal; None if invalid.

    Whitespace is skipped and reading stops at the first character that is not a lowercase
    letter (an end-of-text token, punctuation), so trailing tokens do not matter.
    """
    start = prompt.strip()
    if len(start) != 1 or start not in LETTERS[: len(graph.edges)]:
        return None
    path = [LETTERS.index(start)]
    for char in response:
        if path[-1] == GOAL:
            break
        if char.isspace():
            continue
        if char not in LETTERS:
            break
        node = LETTERS.index(char)
        if node >= len(graph.edges) or node not in graph.edges[path[-1]]:
            return None
        path.append(node)
    return path if path[-1] == GOAL else None


def optimality(graph: WalkGraph, path: list[int] | None) -> float:
    if path is None or len(path) < 2:
        return 0.0
    return graph.distance[path[0]] / (len(path) - 1)


def reward(prompt: str, response: str, answer: object = None, *, graph: WalkGraph | None = None) -> float:
    """Shortest distance / walk length: 1.0 for a shortest path, 0.0 for an invalid one."""
    graph = graph or make_graph()
    return optimality(graph, parse_path(graph, prompt, response))


def _split(rows: list[dict], seed: int, eval_fraction: float) -> Split:
    return split_by_key(rows, lambda row: row["prompt"], eval_fraction, seed)


def _walks(graph: WalkGraph, seed: int, walks: int, max_length: int) -> list[list[int]]:
    rng = seeded_rng(seed, "randomwalks-walks")
    starts = graph.starts
    return [graph.random_walk(rng.choice(starts), rng, max_length) for _ in range(walks)]


def _row(graph: WalkGraph, path: list[int]) -> dict:
    reached = path[-1] == GOAL
    return {"prompt": LETTERS[path[0]], "completion": letters(path[1:]), "reward": optimality(graph, path if reached else None)}


def sft_examples(
    *, seed: int = 0, eval_fraction: float = 0.1, walks: int = 1000, max_length: int = 10, graph: WalkGraph | None = None
) -> Split:
    """One shortest path per start node plus `walks` random walks, each with its "reward" (for ilql)."""
    graph = graph or make_graph()
    paths = [graph.optimal_path(start) for start in graph.starts] + _walks(graph, seed, walks, max_length)
    return _split(shuffled([_row(graph, path) for path in paths], seed), seed, eval_fraction)


def preference_examples(
    *, seed: int = 0, eval_fraction: float = 0.1, walks: int = 1000, max_length: int = 10, graph: WalkGraph | None = None
) -> Split:
    """A shortest path (chosen) against a random walk from the same start that is not one (rejected)."""
    graph = graph or make_graph()
    rows = [
        {"prompt": LETTERS[path[0]], "chosen": letters(graph.optimal_path(path[0])[1:]), "rejected": letters(path[1:])}
        for path in _walks(graph, seed, walks, max_length)
        if _row(graph, path)["reward"] < 1.0
    ]
    return _split(rows, seed, eval_fraction)


def prompt_examples(*, seed: int = 0, eval_fraction: float = 0.1, graph: WalkGraph | None = None) -> Split:
    """One prompt per start node, in a seeded order; recipes cycle through them."""
    graph = graph or make_graph()
    rows = [{"prompt": LETTERS[start]} for start in graph.starts]
    return _split(shuffled(rows, seed), seed, eval_fraction)
