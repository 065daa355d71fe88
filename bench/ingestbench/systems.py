"""What both systems under test offer: the same operations, each in its own API, on the same data."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from ingestbench.postgres import Pg
from ingestbench.processes import Server, run_threads

SEARCH_WORDS = [
    "amber",
    "birch",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "glacier",
    "harbor",
    "iris",
    "juniper",
    "kestrel",
    "lagoon",
    "meadow",
    "nebula",
    "onyx",
    "prairie",
    "quartz",
    "raven",
    "sierra",
    "tundra",
]
SEARCH_TERM = "glacier"  # 1 run in 20 has it in its name
# Status of seeded run i is STATUS_CYCLE[i % 10]: 1 in 10 is queued, like the `status=queued` filter.
STATUS_CYCLE = ["succeeded", "succeeded", "failed", "succeeded", "cancelled", "running", "succeeded", "queued", "failed", "lost"]


@dataclass
class Request:
    method: str
    url: str
    body: bytes | None = None
    n: int = 0  # points it carries


class System:
    """One system under test: the requests it takes for each operation, and how its data is seeded."""

    name: str
    health_path: str
    server: Server
    db: str

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.base_url, headers=self.headers(), timeout=60)

    def headers(self) -> dict[str, str]:
        return {"content-type": "application/json"}

    def create_run(self, client: httpx.Client, name: str) -> str: ...
    def batch(self, run: str, points: list[tuple[str, int, float, float]]) -> Request: ...
    def single(self, run: str, point: tuple[str, int, float, float]) -> Request: ...
    def check_batch(self, response: httpx.Response, n: int) -> None: ...
    def list_requests(self) -> dict[str, Request]: ...
    def seed_sql(self, pg: Pg, n: int) -> None: ...
    def seed_api(self, pg: Pg, n: int, clients: int) -> None: ...
    def list_rows(self, response: httpx.Response) -> int: ...


def expect(response: httpx.Response, status: int = 200) -> httpx.Response:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text[:500]}")
    return response


def seed_names_sql(index: str) -> str:
    """SQL for the name of seeded run `index`: e.g. glacier-sft-04217; 1 in 20 names holds each word."""
    return f"(%(words)s::text[])[1 + mod({index} / 10, {len(SEARCH_WORDS)})] || '-sft-' || lpad({index}::text, 5, '0')"


def parallel_create(system: System, names: list[str], clients: int) -> None:
    chunks = [names[i::clients] for i in range(clients)]

    def work(chunk: list[str]) -> None:
        with system.client() as client:
            for name in chunk:
                system.create_run(client, name)

    run_threads([lambda c=c: work(c) for c in chunks])
