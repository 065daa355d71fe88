"""Reading spec documents (YAML or JSON) into plain dicts, and `--set key=value` overrides.

Both readers reject duplicate keys: YAML and JSON parsers normally keep the last one silently,
and a spec that says `lr` twice is a mistake we want to hear about.
"""

from __future__ import annotations

import copy
import json
import re
import typing
from typing import Any

import yaml

from rlplane.spec.base import SpecError, format_loc, resolve_loc, variants

# Anchors and aliases are fine, but a few nested aliases can expand to billions of values
# ("billion laughs"); the API reads YAML from users, so the expanded size is capped.
MAX_YAML_NODES = 100_000


def _expanded_size(node: yaml.Node, memo: dict[int, int | None]) -> int:
    """Values the node expands to with every alias copied out; a node that contains itself fails."""
    if id(node) in memo:
        if memo[id(node)] is None:
            raise yaml.constructor.ConstructorError(None, None, "an alias refers to itself", node.start_mark)
        return memo[id(node)]
    memo[id(node)] = None  # being counted
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, memo) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(key, memo) + _expanded_size(value, memo) for key, value in node.value)
    memo[id(node)] = size
    return size


class _SpecLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and oversized alias expansions, and reads 1e-5 as
    a float (as YAML 1.2 does) rather than a string."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_YAML_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"the document expands to more than {MAX_YAML_NODES} values", node.start_mark
            )
        return self.construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *anchor" merges may repeat keys on purpose
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, typing.Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            if isinstance(key, typing.Hashable):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _yaml_error(exc: yaml.YAMLError) -> SpecError:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return SpecError.single("yaml_invalid", f"invalid YAML{where}: {problem}")


def read_yaml(text: str) -> Any:
    try:
        return yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ValueError(f"duplicate key {duplicates[0]!r}")
    return dict(pairs)


def read_json(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise SpecError.single("json_invalid", f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:  # raised by _no_duplicates
        raise SpecError.single("json_invalid", f"invalid JSON: {exc}") from None


def read_document(text: str | bytes, fmt: str | None = None) -> dict:
    """Parse a spec document into a dict; fmt is "yaml", "json" or None (JSON if it is a JSON object)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError.single(f"{fmt or 'yaml'}_invalid", f"the spec is not UTF-8 text: {exc}") from None
    if fmt not in (None, "yaml", "json"):
        raise ValueError(f"fmt must be 'yaml', 'json' or None, not {fmt!r}")
    if fmt == "json":
        data = read_json(text)
    elif fmt is None and text.lstrip().startswith("{"):
        # Try JSON first: its error messages are clearer for JSON input, and YAML reads it anyway.
        try:
            data = read_json(text)
        except SpecError as json_error:
            try:
                data = read_yaml(text)  # YAML flow style, e.g. {name: x, ...}
            except SpecError:
                raise json_error from None
    else:
        data = read_yaml(text)
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}"
        raise SpecError.single(
            "not_a_mapping", f"the spec is {what}; expected a mapping with name, algorithm, model, data and train"
        )
    return data


# --- overrides ---


def _fail(item: str, msg: str) -> SpecError:
    # loc stays empty: the message already quotes the override, which is what the user typed.
    return SpecError.single("override_invalid", f"--set {item!r}: {msg}")


def _parse_override(item: str) -> tuple[list[str | int], Any]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise _fail(item, "expected KEY=VALUE, e.g. train.lr=3e-5")
    parts = key.split(".")
    if any(not part for part in parts):
        raise _fail(item, f"{key!r} is not a dotted path like train.lr")
    try:
        value = read_yaml(raw) if raw.strip() else ""
    except SpecError as exc:
        raise _fail(item, str(exc)) from None
    return [int(p) if p.isdigit() else p for p in parts], value


def _switch_kind(section: dict, kind: Any, path: list[str | int], root: type | None) -> dict:
    """Changing a union's `kind` keeps only the fields the new kind accepts: backend.kind=deepspeed
    drops torch's ddp but keeps precision."""
    if root is None or section.get("kind") == kind:
        return section
    _, parent = resolve_loc(root, path)
    field = parent.model_fields.get(path[-1]) if parent is not None else None
    new = variants(field.annotation).get(kind) if field is not None else None
    if new is None:
        return section  # an unknown kind: validation names the allowed ones
    return {key: value for key, value in section.items() if key in new.model_fields}


def _container(result: dict, item: str, path: list[str | int]) -> dict | list:
    """The dict or list that holds path[-1], creating missing mappings on the way."""
    node: Any = result
    for depth, part in enumerate(path[:-1]):
        if isinstance(node, list) and isinstance(part, int):
            if part >= len(node):
                raise _fail(item, f"{format_loc(path[: depth + 1])} is past the end of the list")
            node = node[part]
            continue
        if not isinstance(node, dict):
            raise _fail(item, f"{format_loc(path[:depth])} is not a mapping, so it has no key {part!r}")
        key = str(part)
        if node.get(key) is None:
            node[key] = {}
        node = node[key]
    if isinstance(node, dict):
        return node
    if isinstance(node, list) and isinstance(path[-1], int):
        if path[-1] < len(node):
            return node
        raise _fail(item, f"{format_loc(path)} is past the end of the list")
    raise _fail(item, f"{format_loc(path[:-1])} is not a mapping, so it has no key {path[-1]!r}")


def apply_overrides(data: dict, sets: list[str], root: type | None = None) -> dict:
    """Return a copy of `data` with each "dotted.key=value" applied. Values are YAML (3e-5, true,
    null, [a, b], {kind: builtin, name: x}); an empty value is the empty string. With `root` (the
    spec model) a changed `kind` drops the fields the new kind does not have."""
    result = copy.deepcopy(data)
    for item in sets:
        path, value = _parse_override(item)
        node = _container(result, item, path)
        if isinstance(node, list):
            node[path[-1]] = value
            continue
        if path[-1] == "kind" and len(path) > 1:
            switched = _switch_kind(node, value, path[:-1], root)
            node.clear()
            node.update(switched)
        node[str(path[-1])] = value
    return result
