"""Safe YAML reading with limits, so that a hostile configuration fails fast, on one line.

PyYAML's ``safe_load`` constructs no Python objects beyond plain data, but it
still lets the last of two equal keys win silently, expands aliases without
bound (the "billion laughs": a few lines that stand for 10**9 values), recurses
once per nesting level (10,000 nested ``[`` end in RecursionError), and lets
``ValueError`` escape from scalars it cannot convert (an int of 5,000 digits,
the date 2001-02-30). :func:`read_yaml` refuses all of those before any value
reaches the loader, with a message naming the line:

* text over ``MAX_CHARS`` characters;
* more than ``MAX_DEPTH`` levels of nesting, or more than ``MAX_NODES`` values;
* more than ``MAX_ALIASES`` alias uses, an alias inside the node it names, or
  more than ``MAX_EXPANDED`` values once aliases are expanded;
* a key given twice in one mapping (``<<`` merge keys may still be overridden).

YAML syntax and tag errors stay :class:`yaml.YAMLError`, for the caller to
word as "not valid YAML"; the limits raise :class:`ConfigError`.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import ConfigError
from ._fields import short_path, show

MAX_CHARS = 256 * 1024     # a real configuration is a few KiB; PyYAML reads ~50 KiB/s
MAX_DEPTH = 64             # nested lists and mappings (a config needs under 10)
MAX_NODES = 50_000         # values written in the text (1000 conv layers need ~15,000)
MAX_ALIASES = 100          # uses of *name
MAX_EXPANDED = 100_000     # values once every alias is replaced by what it names

_MERGE = "tag:yaml.org,2002:merge"
_KIND = {"int": "an integer", "float": "a number", "timestamp": "a date", "bool": "a boolean",
         "binary": "base64 data"}


def _cut(text: str, n: int = 120) -> str:
    return text if len(text) <= n else "..." + text[-(n - 3):]


class _Loader(yaml.SafeLoader):
    """SafeLoader that counts as it composes and refuses duplicate keys as it constructs."""

    def __init__(self, text: str):
        super().__init__(text)
        self._depth = 0
        self._nodes = 0
        self._aliases = 0
        self._open: set = set()              # anchors of the nodes being composed
        self.paths: dict[int, str] = {}      # id(mapping node) -> its YAML path
        self._checked: set = set()           # ids of mappings checked for duplicate keys

    def compose_node(self, parent, index):
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise ConfigError(f"line {line}: alias *{_cut(event.anchor, 40)} is alias "
                                  f"use number {self._aliases}; expected at most "
                                  f"{MAX_ALIASES} alias uses in a configuration")
            if event.anchor in self._open:
                raise ConfigError(f"line {line}: alias *{_cut(event.anchor, 40)} is inside "
                                  f"the value it names; expected no recursive aliases")
            return super().compose_node(parent, index)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise ConfigError(f"line {line}: more than {MAX_NODES} values; expected a "
                              f"configuration of at most {MAX_NODES} values")
        if self._depth >= MAX_DEPTH:
            raise ConfigError(f"line {line}: nested more than {MAX_DEPTH} levels deep; "
                              f"expected at most {MAX_DEPTH} levels of lists and mappings")
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open.add(anchor)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open.discard(anchor)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (yaml.YAMLError, ConfigError):
            raise
        except Exception as e:
            # Scalars only: int("9" * 5000), date(2001, 2, 30), `!!bool maybe` (KeyError),
            # `!!timestamp x` (AttributeError). A collection's own constructor runs
            # later, outside this frame.
            if not isinstance(node, yaml.ScalarNode):
                raise
            kind = _KIND.get(node.tag.rsplit(":", 1)[-1], f"a {node.tag}")
            reason = " ".join(str(e).split(";")[0].split())
            if len(reason) > 100:
                reason = reason[:97].rsplit(" ", 1)[0] + "..."
            reason = f" ({reason})" if isinstance(e, ValueError) and reason else ""
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {show(node.value)} as {kind}{reason}",
                node.start_mark) from None

    def construct_mapping(self, node, deep=False):
        self._refuse_duplicates(node)
        return super().construct_mapping(node, deep)

    def flatten_mapping(self, node):
        # A mapping merged into another (`<<: *x`) is flattened in place, merged keys
        # and its own side by side, possibly before its own construct_mapping: check
        # its keys while they are still the ones written.
        self._refuse_duplicates(node)
        super().flatten_mapping(node)

    def _refuse_duplicates(self, node) -> None:
        if not isinstance(node, yaml.MappingNode) or id(node) in self._checked:
            return
        self._checked.add(id(node))
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE or not isinstance(key_node, yaml.ScalarNode):
                continue  # merged keys may be overridden; SafeLoader refuses unhashable ones
            key = self.construct_object(key_node, deep=False)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue
            if first is not key_node:
                raise ConfigError(_duplicate(key, self.paths.get(id(node), "?"),
                                             first.start_mark.line + 1,
                                             key_node.start_mark.line + 1))


def _duplicate(key: Any, path: str, first: int, second: int) -> str:
    lines = f"lines {first} and {second}" if first != second else f"both on line {first}"
    if not path:
        return f"duplicate section {show(key)} ({lines}); expected each section once"
    return f"duplicate key {show(key)} in {short_path(path)} ({lines}); expected each key once"


def _children(node: yaml.Node, path: str) -> list[tuple[yaml.Node, str]]:
    if isinstance(node, yaml.SequenceNode):
        return [(child, f"{path}[{i}]") for i, child in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        out = []
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else "?"
            name = name if len(name) <= 40 else name[:37] + "..."
            out += [(key, path), (value, f"{path}.{name}" if path else name)]
        return out
    return []


def _measure(root: yaml.Node, paths: dict[int, str]) -> int:
    """The number of values ``root`` stands for with aliases expanded (capped just past
    MAX_EXPANDED), recording each mapping's YAML path in ``paths`` on the way.

    Iterative post-order over the composed graph, each node once: aliases share
    nodes, and compose_node refused cycles.
    """
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, str, bool]] = [(root, "", False)]
    while stack:
        node, path, done = stack.pop()
        children = _children(node, path)
        if done:
            total = 1 + sum(sizes[id(child)] for child, _ in children)
            sizes[id(node)] = min(total, MAX_EXPANDED + 1)
        elif id(node) not in sizes:
            if isinstance(node, yaml.MappingNode):
                paths.setdefault(id(node), path)
            stack.append((node, path, True))
            stack.extend(item + (False,) for item in reversed(children)
                         if id(item[0]) not in sizes)
    return sizes[id(root)]


def read_yaml(text: str) -> Any:
    """The data of the YAML document ``text`` (None when it is empty), within the limits.

    Raises ConfigError for a limit broken or a duplicate key, and yaml.YAMLError
    for text that is not valid YAML (syntax, unknown or unsafe tags, unreadable
    scalars, two documents).
    """
    if len(text) > MAX_CHARS:
        raise ConfigError(f"the configuration is {len(text)} characters long; expected at "
                          f"most {MAX_CHARS} ({MAX_CHARS // 1024} KiB)")
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        if _measure(root, loader.paths) > MAX_EXPANDED:
            raise ConfigError(f"aliases expand the configuration to more than {MAX_EXPANDED} "
                              f"values; expected at most {MAX_EXPANDED}, aliases expanded")
        return loader.construct_document(root)
    except RecursionError:  # a safety net: MAX_DEPTH keeps the composer far from the limit
        raise yaml.YAMLError(f"nested too deeply; expected at most {MAX_DEPTH} levels of "
                             "lists and mappings") from None
    finally:
        loader.dispose()
