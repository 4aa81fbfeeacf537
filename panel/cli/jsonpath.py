"""`-o jsonpath=TEMPLATE`: the part of kubectl's JSONPath templates that scripts use.

A template is text with expressions in braces; each expression prints its results, several joined by a
space, and the text between is printed as written:

    {.status}                      a field
    {.items[*].name}               every item's field
    {.items[0].npus[-1].logic_id}  an index (negative counts from the end)
    {.items[1:3].name}             a slice
    {.spec['engine'].dtype}        a quoted field name (for names with dots or dashes)
    {.items[?(@.status=="running")].name}   items whose field equals (==) or differs from (!=) a literal
    {..name}                       every `name` at any depth
    {.name}{"\\t"}{.status}{"\\n"}   a quoted literal ("\\n", "\\t" and "\\\\" are escapes)

`$` may start a path (`{$.items[*].name}`). Strings print as they are, other values as JSON. A field that
is not there prints nothing, as kubectl does. `{range}` / `{end}` are not supported.
"""

import argparse
import json
import re
from dataclasses import dataclass

PREFIX = "jsonpath="
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
LITERAL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\"}
MISSING = object()


class JsonPathError(ValueError):
    pass


@dataclass(frozen=True)
class Field:
    name: str


@dataclass(frozen=True)
class Index:
    index: int


@dataclass(frozen=True)
class Slice:
    start: int | None
    stop: int | None


@dataclass(frozen=True)
class Wildcard:
    pass


@dataclass(frozen=True)
class Descend:  # `..`: the node and every node below it
    pass


@dataclass(frozen=True)
class Filter:
    path: tuple  # the steps after `@`
    equal: bool  # == or !=
    value: object


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Path:
    steps: tuple


class Template:
    """A parsed template: `Template("{.items[*].name}").render(data)`. JsonPathError when it cannot be
    parsed, naming where."""

    def __init__(self, source: str):
        self.source = source
        self.parts = _parse_template(source)

    def render(self, data) -> str:
        out = []
        for part in self.parts:
            if isinstance(part, Text):
                out.append(part.text)
            else:
                out.append(" ".join(_text(value) for value in evaluate(part, data)))
        return "".join(out)


def evaluate(path: Path, data) -> list:
    """Every value `path` reaches in `data`, in document order."""
    found = [data]
    for step in path.steps:
        found = [value for node in found for value in _step(step, node)]
    return found


def _step(step, node) -> list:
    if isinstance(step, Field):
        value = node.get(step.name, MISSING) if isinstance(node, dict) else MISSING
        return [] if value is MISSING else [value]
    if isinstance(step, Index):
        if isinstance(node, list) and -len(node) <= step.index < len(node):
            return [node[step.index]]
        return []
    if isinstance(step, Slice):
        return node[step.start : step.stop] if isinstance(node, list) else []
    if isinstance(step, Wildcard):
        if isinstance(node, dict):
            return list(node.values())
        return list(node) if isinstance(node, list) else []
    if isinstance(step, Descend):
        return list(_descendants(node))
    if isinstance(step, Filter):
        items = node if isinstance(node, list) else list(node.values()) if isinstance(node, dict) else []
        return [item for item in items if _matches(step, item)]
    raise AssertionError(step)


def _descendants(node):
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from _descendants(child)


def _matches(step: Filter, item) -> bool:
    """== keeps items with an equal value there; != items that have the field with another value."""
    values = evaluate(Path(step.path), item)
    hit = any(_same(value, step.value) for value in values)
    return hit if step.equal else bool(values) and not hit


def _same(a, b) -> bool:
    """Equal as JSON values: 1 == 1.0, but true is not 1 and "1" is not 1."""
    if _is_number(a) and _is_number(b):
        return a == b
    return type(a) is type(b) and a == b


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --- parsing -----------------------------------------------------------------------------------------------


def _parse_template(source: str) -> list:
    parts: list = []
    text: list[str] = []
    i = 0
    while i < len(source):
        char = source[i]
        if char == "{":
            end = _closing_brace(source, i)
            if text:
                parts.append(Text("".join(text)))
                text = []
            raw = source[i + 1 : end]
            # offset + k is the 1-based character number of the expression's k-th character
            offset = i + 2 + len(raw) - len(raw.lstrip())
            parts.append(_parse_expression(raw.strip(), offset))
            i = end + 1
        elif char == "}":
            raise JsonPathError(f"unexpected }} at character {i + 1}")
        else:
            text.append(char)
            i += 1
    if text:
        parts.append(Text("".join(text)))
    if not any(isinstance(part, Path) for part in parts):
        raise JsonPathError("no expression in braces, e.g. {.status}")
    return parts


def _closing_brace(source: str, start: int) -> int:
    """The index of the `}` closing the `{` at `start`, skipping quoted text inside."""
    quote = None
    i = start + 1
    while i < len(source):
        char = source[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "}":
            return i
        i += 1
    raise JsonPathError(f"the {{ at character {start + 1} is not closed")


def _parse_expression(expression: str, offset: int):
    if not expression:
        raise JsonPathError(f"empty braces at character {offset - 1}")
    if expression in ("range", "end") or expression.startswith("range "):
        raise JsonPathError("{range} … {end} is not supported; use {.items[*].field}")
    if expression[0] in "\"'":
        literal, rest = _literal(expression, 0)
        if rest != len(expression) or not isinstance(literal, str):
            raise JsonPathError(f"after a quoted text only }} may follow, at character {offset + rest}")
        return Text(literal)
    steps, end = _parse_path(expression, 0, offset)
    if end != len(expression):
        raise JsonPathError(f"unexpected {expression[end]!r} at character {offset + end}")
    return Path(tuple(steps))


def _parse_path(text: str, i: int, offset: int, stop: str = "") -> tuple[list, int]:
    """The steps of a path from text[i:], up to the end or a character of `stop`."""
    steps: list = []
    if i < len(text) and text[i] in "$@":
        i += 1
    elif i < len(text) and text[i] not in ".[":
        raise JsonPathError(f"a path starts with . or $, at character {offset + i}")
    while i < len(text) and text[i] not in stop:
        char = text[i]
        if text.startswith("..", i):
            steps.append(Descend())
            i += 2
            i = _field_after_dot(text, i, offset, steps)
        elif char == ".":
            i = _field_after_dot(text, i + 1, offset, steps)
        elif char == "[":
            step, i = _bracket(text, i, offset)
            steps.append(step)
        else:
            break
    return steps, i


def _field_after_dot(text: str, i: int, offset: int, steps: list) -> int:
    if i < len(text) and text[i] == "*":
        steps.append(Wildcard())
        return i + 1
    if i < len(text) and text[i] == "[":
        return i  # `..[0]`, `.[0]`: the bracket follows
    match = NAME.match(text, i)
    if not match:
        raise JsonPathError(f"a field name is missing at character {offset + i}")
    steps.append(Field(match.group()))
    return match.end()


def _bracket(text: str, i: int, offset: int) -> tuple[object, int]:
    end = _bracket_end(text, i, offset)
    inner = text[i + 1 : end].strip()
    where = offset + i
    if inner == "*":
        return Wildcard(), end + 1
    if inner[:1] in "\"'":
        name, used = _literal(inner, 0)
        if used != len(inner) or not isinstance(name, str):
            raise JsonPathError(f"a quoted field name is expected in [] at character {where}")
        return Field(name), end + 1
    if inner.startswith("?(") and inner.endswith(")"):
        condition = inner[2:-1]
        return _filter(condition.strip(), where + 3 + len(condition) - len(condition.lstrip())), end + 1
    if ":" in inner:
        start, _, stop = inner.partition(":")
        try:
            return Slice(_int_or_none(start), _int_or_none(stop)), end + 1
        except ValueError:
            raise JsonPathError(f"a slice is [start:end] with whole numbers, at character {where}") from None
    try:
        return Index(int(inner)), end + 1
    except ValueError:
        raise JsonPathError(
            f"[{inner}] at character {where}: give an index, *, a slice, a quoted name or ?(@.field==value)"
        ) from None


def _bracket_end(text: str, i: int, offset: int) -> int:
    depth, quote, j = 0, None, i
    while j < len(text):
        char = text[j]
        if quote:
            if char == "\\":
                j += 1
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    raise JsonPathError(f"the [ at character {offset + i} is not closed")


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return int(text) if text else None


def _filter(condition: str, offset: int) -> Filter:
    if not condition.startswith("@"):
        raise JsonPathError(
            f'a filter compares a field of @, e.g. ?(@.status=="running"), at character {offset}'
        )
    steps, i = _parse_path(condition, 0, offset, stop="=!")
    operator = condition[i : i + 2]
    if operator not in ("==", "!="):
        raise JsonPathError(f"a filter compares with == or !=, at character {offset + i}")
    value_text = condition[i + 2 :].strip()
    if value_text[:1] in "\"'":
        value, used = _literal(value_text, 0)
        if used != len(value_text):
            raise JsonPathError(f"unexpected text after the quoted value at character {offset + i + 2}")
    else:
        try:
            value = json.loads(value_text)
        except ValueError:
            raise JsonPathError(
                f"a filter's value is a quoted text, a number, true, false or null, not {value_text!r}"
            ) from None
        if isinstance(value, dict | list):
            raise JsonPathError("a filter's value is a single value, not a list or object")
    return Filter(tuple(steps), operator == "==", value)


def _literal(text: str, i: int) -> tuple[str, int]:
    """A quoted text from text[i]: its value and the index after its closing quote."""
    quote, out, j = text[i], [], i + 1
    while j < len(text):
        char = text[j]
        if char == "\\" and j + 1 < len(text):
            escaped = text[j + 1]
            if escaped not in LITERAL_ESCAPES:
                raise JsonPathError(f"unknown escape \\{escaped} in {text[i:]}")
            out.append(LITERAL_ESCAPES[escaped])
            j += 2
        elif char == quote:
            return "".join(out), j + 1
        else:
            out.append(char)
            j += 1
    raise JsonPathError(f"the quote in {text[i:]} is not closed")


# --- -o jsonpath=… -----------------------------------------------------------------------------------------


class OutputFormats(tuple):
    """The choices of an `-o` that takes jsonpath=TEMPLATE besides its plain formats (argparse checks
    `value in choices`; help and completion list the plain ones and `jsonpath=`)."""

    def __new__(cls, plain):
        return super().__new__(cls, (*plain, PREFIX))

    def __contains__(self, value) -> bool:
        return (isinstance(value, str) and value.startswith(PREFIX)) or tuple.__contains__(self, value)


def output_format(value: str) -> str:
    """argparse `type` of such an `-o`: a jsonpath template is parsed here, so a wrong one exits 2 before
    anything is sent."""
    if value.startswith(PREFIX):
        try:
            Template(value.removeprefix(PREFIX))
        except JsonPathError as error:
            raise argparse.ArgumentTypeError(f"bad jsonpath template: {error}") from None
    return value


def render(fmt: str, data) -> str:
    """`data` through the template of `fmt` (`jsonpath=…`) without trailing newlines: the caller prints it
    as one line (kubectl adds none; one object per line reads better in a watch and in a shell)."""
    return Template(fmt.removeprefix(PREFIX)).render(data).rstrip("\n")
