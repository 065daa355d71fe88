"""A short-lived cache of resolved tokens, so a busy worker's reports skip two queries each.

Trade-off, documented in docs/api.md: another API process sees a revocation or a role change
within `ttl` seconds; this process sees it at once (every change clears the cache here).
"""

import threading
import time
from dataclasses import dataclass
from datetime import datetime

from api.auth.principal import Principal


@dataclass(frozen=True)
class CachedToken:
    principal: Principal
    expires_at: datetime | None
    stored_at: float


class TokenCache:
    def __init__(self, ttl: float, max_entries: int = 10_000) -> None:
        self.ttl, self.max_entries = ttl, max_entries
        self._entries: dict[str, CachedToken] = {}
        self._lock = threading.Lock()

    def get(self, token_hash: str) -> CachedToken | None:
        entry = self._entries.get(token_hash)
        if entry is None or time.monotonic() - entry.stored_at > self.ttl:
            return None
        return entry

    def put(self, token_hash: str, principal: Principal, expires_at: datetime | None) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[token_hash] = CachedToken(principal, expires_at, time.monotonic())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
