"""Request bodies read within bounds: JSON and YAML with a depth and node limit, duplicate keys refused, and
YAML aliases capped.

YAML's anchors and aliases let a few hundred bytes name billions of values (the "billion laughs": nine levels
of nine aliases each). PyYAML builds such a document as shared objects in a moment, but everything after it
(the strict field walk, a serializer, an error message quoting a value) sees the expanded tree: a 600-byte
body held a web process for 90 s and 1.3 GB. So a body is measured as its readers will see it, aliases
expanded, and refused before anything reads it past MAX_NODES. A few aliases (a shared block of engine
settings) stay allowed.

A key given twice is refused in both formats: JSON and YAML parsers silently keep the last one, so a spec
with two `replicas:` lines would apply whichever came last without a word.
"""

import json
import re

import yaml
from django.conf import settings
from django.utils.translation import gettext as _
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from yaml.events import AliasEvent

MAX_DEPTH = 32  # nested lists and objects; a spec needs five or six
MAX_NODES = 20_000  # every value, aliases counted as often as they repeat what they name
MAX_ALIASES = 16
# An error names the value it refuses by a short prefix only: a message that quoted a value whole grew with
# it (10 MB for a 390-byte YAML body whose aliases expanded into one field).
QUOTED_PREFIX = 60
MAX_MESSAGE = 500
_QUOTED = re.compile(r"([\"'])(.{" + str(QUOTED_PREFIX) + r"})(.+?)\1", re.DOTALL)


class UnsafeInput(ValueError):
    """The body is beyond a limit, or holds a key twice: a 400 saying which."""


def _too_deep() -> UnsafeInput:
    return UnsafeInput(_("The body nests deeper than {limit} levels.").format(limit=MAX_DEPTH))


def _too_many() -> UnsafeInput:
    return UnsafeInput(_("The body holds more than {limit} values.").format(limit=MAX_NODES))


def _duplicate(key) -> UnsafeInput:
    return UnsafeInput(_("The key {key} is given twice.").format(key=clip(repr(key))))


def clip(text: str, limit: int = 60) -> str:
    """A short prefix of a value for an error message: the message must not grow with the value."""
    return text if len(text) <= limit else text[:limit] + "…"


def short(message: str) -> str:
    """An error message with each long quoted value cut to its first QUOTED_PREFIX characters, and at most
    MAX_MESSAGE characters in all (panel.core.rest.exceptions passes every API error through it)."""
    if len(message) <= QUOTED_PREFIX * 2:
        return message
    message = _QUOTED.sub(lambda found: f"{found[1]}{found[2]}…{found[1]}", message)
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE] + "…"


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self.depth = 0
        self.aliases = 0

    def compose_node(self, parent, index):
        # Bounded while composing, before any Python recursion limit: a `[[[[…` body is a 400, not a 500.
        if self.check_event(AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise UnsafeInput(
                    _("The body uses more than {limit} YAML aliases (*name).").format(limit=MAX_ALIASES)
                )
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _too_deep()
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults` may be overridden by the keys beside it: that is its point
                key = self.construct_object(key_node, deep=True)
                try:
                    hashable = key in seen
                except TypeError:
                    continue  # SafeConstructor refuses an unhashable key with its own message
                if hashable:
                    raise _duplicate(key)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _expanded_size(root) -> tuple[int, int]:
    """(values, depth) of a composed YAML document as its readers see it, aliases expanded; stops at the
    first limit passed. Shared nodes are measured once (memo), so this is linear in the document."""
    sizes: dict[int, tuple[int, int]] = {}

    def measure(node, level: int) -> tuple[int, int]:
        if level > MAX_DEPTH:
            raise _too_deep()
        known = sizes.get(id(node))
        if known is not None:
            if level + known[1] > MAX_DEPTH:
                raise _too_deep()
            return known
        count, depth = 1, 1
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        for child in children:
            child_count, child_depth = measure(child, level + 1)
            count += child_count
            depth = max(depth, child_depth + 1)
            if count > MAX_NODES:
                raise _too_many()
        sizes[id(node)] = (count, depth)
        return count, depth

    return measure(root, 1)


def load_yaml(text: str):
    """One YAML document within the limits; UnsafeInput or yaml.YAMLError otherwise."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _refuse_duplicates(pairs):
    found = {}
    for key, value in pairs:
        if key in found:
            raise _duplicate(key)
        found[key] = value
    return found


def load_json(text: str):
    """A JSON document within the limits; UnsafeInput or ValueError otherwise."""
    try:
        data = json.loads(text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
    except RecursionError:
        raise _too_deep() from None
    _check_json_depth(data)
    return data


def _refuse_constant(name):
    raise ValueError(_("{name} is not a JSON number.").format(name=name))


def _check_json_depth(data) -> None:
    # Iterative: the body is already parsed, so only its depth is left to bound (JSON has no aliases, and
    # its size is the request's, limited by DATA_UPLOAD_MAX_MEMORY_SIZE).
    stack = [(data, 1)]
    while stack:
        value, level = stack.pop()
        if level > MAX_DEPTH:
            raise _too_deep()
        if isinstance(value, dict):
            stack.extend((child, level + 1) for child in value.values())
        elif isinstance(value, list):
            stack.extend((child, level + 1) for child in value)


class SafeJSONParser(JSONParser):
    """The API's JSON parser (REST_FRAMEWORK's DEFAULT_PARSER_CLASSES): DRF's, within the limits above."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return load_json(stream.read().decode(encoding))
        except UnsafeInput as error:
            raise ParseError(str(error)) from None
        except (ValueError, UnicodeDecodeError) as error:
            raise ParseError(
                _("The body is not valid JSON: {error}").format(error=clip(str(error), 200))
            ) from None
