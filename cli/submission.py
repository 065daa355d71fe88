"""What `rlplane submit` and `rlplane runs clone` send: the spec as the user wrote it, with --set, --name and an
uploaded data file applied in place (ruamel's round trip keeps the comments, the order and the quoting), so the
run's Spec tab and a later clone show that text rather than a 66-line expansion with every default.

The same changes are applied to the parsed document, which is what gets validated; the text is sent only when it
reads back as exactly that document (otherwise the validated document is sent as JSON).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML

from rlplane.spec import apply_overrides, parse_spec
from rlplane.spec.io import read_document


@dataclass(frozen=True)
class Submission:
    data: dict[str, Any]  # the document with the changes applied, validated
    text: str | None  # the same document as the user's own text, or None to send `data` as JSON

    @property
    def body(self) -> dict[str, Any] | str:
        return self.text if self.text is not None else self.data


def _round_trip() -> YAML:
    yaml = YAML()  # round-trip mode: comments, key order and quotes survive
    yaml.preserve_quotes = True
    yaml.width = 4096  # long comments stay on their line
    return yaml


def prepare(text: str | None, data: dict[str, Any], sets: list[str] | None, name: str | None) -> Submission:
    """`data` (parsed from `text`, when there is a text) with `sets` and `name` applied and validated; raises
    SpecError. The text follows the same changes where it can."""
    changed = apply_overrides(data, sets) if sets else dict(data)
    if name is not None:
        changed["name"] = name
    parse_spec(changed)  # raises SpecError: nothing is sent
    return Submission(changed, _edited(text, sets or [], {"name": name} if name is not None else {}, changed))


def with_value(submission: Submission, key: str, value: Any) -> Submission:
    """The submission with one more top-level-section field set (data.source=dataset:7 after an upload)."""
    section, field = key.split(".")
    data = {**submission.data, section: {**(submission.data.get(section) or {}), field: value}}
    text = _edited(submission.text, [], {key: value}, data)
    return Submission(data, text)


def _edited(text: str | None, sets: list[str], values: dict[str, Any], expected: dict[str, Any]) -> str | None:
    if text is None:
        return None
    yaml = _round_trip()
    try:
        document = apply_overrides(yaml.load(text), sets) if sets else yaml.load(text)
        for key, value in values.items():
            node = document
            *parents, last = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
        out = io.StringIO()
        yaml.dump(document, out)
        edited = out.getvalue()
        return edited if read_document(edited, "yaml") == expected else None
    except Exception:  # ruamel reads a few documents otherwise than PyYAML does: then the document goes as JSON
        return None
