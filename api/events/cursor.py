"""The SSE event id: the last row id seen in each append-only table of a run."""

from dataclasses import astuple, dataclass, replace


@dataclass(frozen=True)
class Cursor:
    event: int = 0
    metric: int = 0
    log: int = 0
    sample: int = 0

    def encode(self) -> str:
        return f"{self.event}-{self.metric}-{self.log}-{self.sample}"

    @classmethod
    def decode(cls, value: str | None) -> "Cursor | None":
        """None for a missing or malformed id (the stream then starts from now)."""
        if not value:
            return None
        parts = value.split("-")
        if len(parts) != 4 or not all(p.isdigit() and len(p) <= 19 for p in parts):
            return None
        return cls(*(int(p) for p in parts))

    def advanced(self, **kwargs: int) -> "Cursor":
        return replace(self, **kwargs)

    def behind(self, other: "Cursor") -> bool:
        """Whether some table has rows up to `other` that this cursor has not seen."""
        return any(mine < theirs for mine, theirs in zip(astuple(self), astuple(other), strict=True))
