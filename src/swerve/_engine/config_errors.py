"""The one translation of pydantic's validation errors into the text of a ``ConfigError``: each
bad field with the value given and what is wrong with it (``cooldown_s: -5 is below 0``), an
unknown key with the nearest known one, two spellings of one field named as such. No pydantic
wording or URL reaches a user."""

from __future__ import annotations

import difflib
import re
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import AliasChoices, BaseModel, ValidationError
from pydantic_core import ErrorDetails

__all__ = ["Loc", "describe", "shown", "where"]

# How many field errors one message lists; a document with thousands of bad keys would
# otherwise make a message (and a log line) of unbounded length.
MAX_ERRORS = 5
# The tags pydantic adds to a location inside ``str | list[str]`` (a fallback map's values).
_STR_TAG, _LIST_TAG = "str", "list[str]"
# Keys longer than this get no suggestion: difflib's cost grows with the product of lengths.
_SUGGEST_MAX_LEN = 64

_NOT_A = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "dict_type": "an object",
    "mapping_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "frozen_set_type": "a list",
    "iterable_type": "a list",
}
_BOUNDS = {
    "greater_than_equal": ("ge", "is below"),
    "greater_than": ("gt", "is not above"),
    "less_than_equal": ("le", "is above"),
    "less_than": ("lt", "is not below"),
}


def _short_repr() -> reprlib.Repr:
    shown = reprlib.Repr()
    shown.maxstring = shown.maxother = 40
    shown.maxlist = shown.maxtuple = shown.maxdict = shown.maxset = shown.maxfrozenset = 4
    shown.maxlevel = 2
    return shown


_REPR = _short_repr()


Loc = Sequence[int | str]


def describe(exc: ValidationError, model: type[BaseModel], at: Loc = ()) -> str:
    """Every error of ``exc`` (the first few) as ``field: what is wrong``, joined by ``; ``;
    ``at`` is where in a larger document ``model``'s section sits."""
    parts: list[str] = []
    errors = [e for e in (_one(err, model) for err in exc.errors(include_url=False)) if e]
    for loc, text in errors[:MAX_ERRORS]:
        name = where([*at, *loc])
        parts.append(f"{name}: {text}" if name else text)
    if len(errors) > MAX_ERRORS:
        parts.append(f"and {len(errors) - MAX_ERRORS} more")
    return "; ".join(parts)


def where(loc: Loc) -> str:
    """A location as a user reads it: ``breaker.min_calls``, ``fallbacks['a/b'][1]``. Keys come
    from the document: one holding a newline or an ANSI escape is shown escaped (repr), so it
    cannot forge or repaint the log line that reports it."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier():
            out += f".{part}" if out else part
        elif out:
            out += f"[{part!r}]"
        else:
            out = part if part.isprintable() else repr(part)
    return out


def shown(value: object) -> str:
    """A value as the message quotes it: short, one printable line, JSON's null/true/false."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int) and value.bit_length() > 80:
        # repr() of an integer of more than 4300 digits raises; none is worth printing whole.
        return f"(a number of about {int(value.bit_length() * 0.30103) + 1} digits)"
    return _REPR.repr(value)


def _one(err: ErrorDetails, model: type[BaseModel]) -> tuple[Loc, str] | None:
    loc, kind, value = list(err["loc"]), err["type"], err.get("input")
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    if _STR_TAG in loc or _LIST_TAG in loc:
        return _union(loc, kind, value)
    if loc and loc[-1] == "[key]":  # a mapping's key is what is wrong, not its value
        loc.pop()
    if kind == "extra_forbidden":
        return _unknown(model, loc)
    if kind in _NOT_A:
        return loc, f"{shown(value)} is not {_NOT_A[kind]}"
    if kind in _BOUNDS:
        bound, verb = _BOUNDS[kind]
        return loc, f"{shown(value)} {verb} {_number(ctx.get(bound))}"
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", ""))
        text = f"{shown(value)} is not one of {expected}"
        if isinstance(value, str):
            text += _nearest(value, re.findall(r"'([^']*)'", expected))
        return loc, text
    if kind == "json_invalid":
        return loc, f"not valid JSON ({ctx.get('error', err['msg'])})"
    message = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if message.startswith("Input should"):
        message = f"{shown(value)} {message.removeprefix('Input ')}"
    return loc, message


def _union(loc: list[int | str], kind: str, value: object) -> tuple[Loc, str] | None:
    """A fallback map's value is a route or a list of routes: one error, not one per member."""
    if _STR_TAG in loc:
        head = loc[: loc.index(_STR_TAG)]
        if isinstance(value, list):
            return None  # a list: the list member's errors say which item is wrong
        return head, f"{shown(value)} is not a route or a list of routes"
    tag = loc.index(_LIST_TAG)
    if tag == len(loc) - 1:
        return None  # not a list at all: said by the str member's error above
    rest = loc[:tag] + loc[tag + 1 :]
    return rest, f"{shown(value)} is not {_NOT_A.get(kind, 'a route')}"


def _unknown(model: type[BaseModel], loc: Loc) -> tuple[Loc, str]:
    key = loc[-1] if loc else ""
    owner = _model_at(model, loc[:-1])
    if owner is None or not isinstance(key, str):
        return loc, "unknown key"
    spellings = _spellings(owner)
    field = spellings.get(key)
    if field is not None:
        # A known key refused as extra: another spelling of the same field came first.
        names = [*(s for s, f in spellings.items() if f == field and s != key), key]
        return loc[:-1], f"{' and '.join(names)} are the same field, given twice; keep one"
    return loc, "unknown key" + _nearest(key, list(spellings))


def _nearest(key: str, names: Sequence[str]) -> str:
    """``; did you mean 'name'?`` for the known name closest to ``key`` (case and underscores
    aside), or nothing when none is close."""
    if len(key) > _SUGGEST_MAX_LEN:
        return ""
    folded = {name.lower().replace("_", ""): name for name in names}
    match = difflib.get_close_matches(key.lower().replace("_", ""), list(folded), n=1, cutoff=0.6)
    return f"; did you mean {folded[match[0]]!r}?" if match else ""


def _spellings(model: type[BaseModel]) -> dict[str, str]:
    """Every key ``model`` accepts (field names and their aliases) -> the field's name."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():
        out[name] = name
        alias = info.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias, info.alias]
        out.update({choice: name for choice in choices if isinstance(choice, str)})
    return out


def _model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model that holds the keys at ``loc`` (a nested section such as ``breaker``)."""
    current = model
    for part in loc:
        name = _spellings(current).get(part) if isinstance(part, str) else None
        annotation = current.model_fields[name].annotation if name is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        current = annotation
    return current


def _number(bound: object) -> str:
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return shown(bound)
