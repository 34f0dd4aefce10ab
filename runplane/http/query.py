"""Query-string parsing with problems that name the parameter.

Unknown parameters are refused: every route declares the parameters it reads with
``@accepts_query(...)`` (none when it has no declaration), and :func:`check_query`, a
``before_request`` hook that runs after the auth hook, answers 400 naming each other one,
the accepted ones and the close one (``?status=`` on a route that filters by ``phase`` must
not silently list everything). ``token`` is accepted where the route's auth rule takes
``?token=``. A route marked ``@ignores_query`` is not checked (its docstring says why),
nor is Quart's ``static`` route (cache-busting parameters on files are common and harmless).

A declaration is a name (free text: at most 256 characters, no control characters) or a
typed :class:`Param` (:func:`integer`, :func:`boolean`, :func:`choice`, :func:`number`,
:func:`pattern`, :func:`text`): its JSON Schema is what the OpenAPI document says of the
parameter, and :func:`check_query` refuses every value it does not allow before the route
runs (an empty value is the parameter left out), so the parsing helpers below
(``int_arg``, ``flag_arg``, ``choice_arg``, ...) only read what the document allows
(docs/api.md "OpenAPI").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, TypeVar

from quart import current_app, request

from runplane.http.openapi.route_doc import doc_of
from runplane.problems import FieldProblem, Problem
from runplane.suggest import accepted_phrase

#: The attribute ``accepts_query`` puts on a view function (None: not checked): the names.
QUERY_ATTR = "runplane_query_params"
#: The attribute with the declared parameters themselves (:class:`Param`, by name).
QUERY_PARAMS_ATTR = "runplane_query_declared"
#: The query parameter that carries a credential where the route's auth rule allows it.
TOKEN_PARAM = "token"
#: Endpoints never checked: Quart's static files.
UNCHECKED_ENDPOINTS = frozenset({"static"})

V = TypeVar("V", bound=Callable[..., object])


#: What a text parameter or a path id may hold: no control characters (input_checks.py).
NO_CONTROL = "^[^\\u0000-\\u001f\\u007f]*$"
#: The longest free-text query value (:func:`str_arg`'s default).
TEXT_MAX = 256
#: The largest integer a query parameter may be when its route sets no maximum: what a
#: 64-bit column (or SQL ``LIMIT``/``OFFSET``) takes.
INT64_MAX = 2**63 - 1
#: The values :func:`flag_arg` takes (``paginate=1`` is the spec's spelling).
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes"), ("0", "false", "no")


@dataclass(frozen=True, slots=True)
class Param:
    """A declared query parameter: its name and the JSON Schema the document gives it,
    which :func:`check_query` holds every value to (before the route's own parsing)."""

    name: str
    schema: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    description: str = ""

    def problem(self, raw: str) -> str | None:
        """Why ``raw`` is not a value of this parameter's schema; None when it is."""
        kind = self.schema.get("type")
        if kind == "string" and "enum" not in self.schema:
            return self._text_problem(raw)
        if "enum" in self.schema:
            accepted = ", ".join(self.schema["enum"])
            if raw in self.schema["enum"]:
                return None
            return f"unknown {self.name} {raw[:40]!r}; accepted: {accepted}"
        if kind == "boolean":
            ok = raw.lower() in TRUE_WORDS + FALSE_WORDS
            return None if ok else f"expected true or false (or 1 or 0), got {raw[:40]!r}"
        return self._number_problem(raw, integral=kind == "integer")

    def wrong_type(self, raw: str) -> bool:
        """Whether ``raw`` is not even of the parameter's type (``?limit=true``): a
        ``bad_type`` refusal, where a value of the type out of bounds is ``invalid``."""
        kind = self.schema.get("type")
        if kind == "boolean":
            return raw.lower() not in TRUE_WORDS + FALSE_WORDS
        if kind in ("integer", "number"):
            shape = _INTEGER if kind == "integer" else _NUMBER
            return len(raw) > 64 or shape.fullmatch(raw) is None
        return False

    def _text_problem(self, raw: str) -> str | None:
        if len(raw) > self.schema.get("maxLength", len(raw)):
            return f"longer than {self.schema['maxLength']} characters"
        regex = self.schema.get("pattern")
        if regex is not None and re.search(regex, raw) is None:
            return f"{raw[:40]!r} does not match {regex}"
        return None

    def _number_problem(self, raw: str, *, integral: bool) -> str | None:
        shape = _INTEGER if integral else _NUMBER
        if len(raw) > 64 or not shape.fullmatch(raw):
            return f"expected {'an integer' if integral else 'a number'}, got {raw[:40]!r}"
        value = int(raw) if _INTEGER.fullmatch(raw) else float(raw)
        low, high = self.schema.get("minimum"), self.schema.get("maximum")
        if value != value or value in (float("inf"), float("-inf")):
            return f"expected a finite number, got {raw[:40]!r}"
        if (low is not None and value < low) or (high is not None and value > high):
            return f"must be between {low} and {high}, got {raw[:40]}"
        return None


def text(name: str, *, max_length: int = TEXT_MAX, description: str = "") -> Param:
    schema = {"type": "string", "maxLength": max_length, "pattern": NO_CONTROL}
    return Param(name, schema, description)


def integer(
    name: str, *, minimum: int = 0, maximum: int = INT64_MAX, description: str = ""
) -> Param:
    return Param(name, {"type": "integer", "minimum": minimum, "maximum": maximum}, description)


def number(name: str, *, minimum: float = 0, description: str = "") -> Param:
    return Param(name, {"type": "number", "minimum": minimum}, description)


def boolean(name: str, *, description: str = "") -> Param:
    words = f"true/false, also {'/'.join(TRUE_WORDS)} and {'/'.join(FALSE_WORDS)}"
    return Param(name, {"type": "boolean"}, f"{description} ({words})" if description else words)


def choice(name: str, choices: Collection[str], *, description: str = "") -> Param:
    return Param(name, {"type": "string", "enum": list(choices)}, description)


def paging(maximum: int) -> tuple[Param, Param]:
    """``limit`` (1 to ``maximum``) and ``offset`` (>= 0) of a plain list."""
    return integer("limit", minimum=1, maximum=maximum), integer("offset")


def pattern(name: str, regex: str, *, description: str = "") -> Param:
    """A text parameter that matches ``regex`` (a JSON Schema / Python pattern)."""
    return Param(name, {"type": "string", "pattern": regex}, description)


def accepts_query(*declared: str | Param) -> Callable[[V], V]:
    """Declare the query parameters a route reads (a bare name is free text); any other
    one is a 400."""
    params = tuple(p if isinstance(p, Param) else text(p) for p in declared)

    def mark(view: V) -> V:
        setattr(view, QUERY_ATTR, tuple(p.name for p in params))
        setattr(view, QUERY_PARAMS_ATTR, params)
        return view

    return mark


def declared_params(view: object) -> tuple[Param, ...]:
    """The typed query parameters a view declares (none when it declares none)."""
    found = getattr(view, QUERY_PARAMS_ATTR, None)
    return tuple(found) if isinstance(found, tuple) else ()


def ignores_query(view: V) -> V:
    """Exempt a route from the unknown-parameter check (say why in its docstring)."""
    setattr(view, QUERY_ATTR, None)
    return view


def check_args(accepted: Collection[str]) -> None:
    """400 naming every query parameter of the request that is not in ``accepted`` (nor
    ``token`` where the route's auth rule takes ``?token=``), the accepted ones and, per
    parameter, the close one."""
    names = list(accepted)
    url_rule = request.url_rule
    credentials: tuple[str, ...] = ()  # accepted without being listed as parameters
    if url_rule is not None:
        declared = doc_of(current_app.view_functions.get(url_rule.endpoint))
        rule = declared.rule if declared is not None else None
        if rule is not None and rule.query_token and TOKEN_PARAM not in names:
            names.append(TOKEN_PARAM)
        if rule is not None and rule.shared:  # a share code or embed token may come so
            credentials = ("share", "embed")
    unknown = [name for name in request.args if name not in names and name not in credentials]
    if not unknown:
        return
    route = f"{request.method} {url_rule.rule}" if url_rule is not None else "this route"

    def phrase(name: str | None) -> str:
        if not names:
            return f"{route} takes no query parameters"
        return accepted_phrase(names, name)

    def message(name: str) -> str:
        text = f"unknown query parameter {name!r}; {phrase(name)}"
        if name == TOKEN_PARAM:
            text += "; send a token as the header 'Authorization: Bearer <token>'"
        return text

    errors = [FieldProblem(name, "unknown_parameter", message(name)) for name in unknown]
    if len(errors) == 1:
        detail = errors[0].message
    else:
        listed = ", ".join(repr(name) for name in unknown)
        detail = f"unknown query parameters {listed}; {phrase(None)}"
    raise Problem(400, "invalid_query", detail, errors)


async def check_query() -> None:
    """``before_request`` hook (after the auth hook): the matched route's declared
    parameters are the accepted ones. Unmatched requests (404, 405) and OPTIONS pass."""
    endpoint = request.endpoint
    if request.url_rule is None or request.method == "OPTIONS" or endpoint is None:
        return
    if endpoint in UNCHECKED_ENDPOINTS:
        return
    view = current_app.view_functions.get(endpoint)
    accepted: Collection[str] | None = getattr(view, QUERY_ATTR, ())
    if accepted is not None:
        check_args(accepted)
        check_values(declared_params(view))


def check_values(params: tuple[Param, ...]) -> None:
    """400 naming the first declared parameter whose value its schema does not allow. An
    empty value is the parameter left out (the document says so: ``allowEmptyValue``)."""
    for param in params:
        for raw in request.args.getlist(param.name):
            message = param.problem(raw) if raw != "" else None
            if message is None:
                continue
            if "enum" in param.schema:  # the accepted values are in the message
                error = FieldProblem(param.name, "not_allowed", message)
                raise Problem(400, "invalid_query", message, [error])
            if param.wrong_type(raw):
                raise _bad_type(param.name, message)
            raise _bad(param.name, message)


def _bad(name: str, message: str) -> Problem:
    return Problem(
        400, "invalid_query", f"{name}: {message}", [FieldProblem(name, "invalid", message)]
    )


def _bad_type(name: str, message: str) -> Problem:
    """A query value that is not of the parameter's type (``?limit=true``): 400 ``bad_type``
    naming the parameter, as a body's field of the wrong type is."""
    errors = [FieldProblem(name, "bad_type", message)]
    return Problem(400, "bad_type", f"{name}: {message}", errors)


#: Longest integer literal looked at: no work converting a 4,400-digit string.
_INT_CHARS = 20
#: An integer as the document's ``type: integer`` writes one (no sign but -, no spaces,
#: no ``_``, ASCII digits only: ``int()`` takes all of those).
_INTEGER = re.compile(r"-?[0-9]+")
#: A JSON number.
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def int_arg(name: str, default: int, *, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    """An optional integer parameter: 400 ``bad_type`` for a value that is not an integer
    (``true``, ``1.5``, ``+7``), 400 ``invalid_query`` for one out of range."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if _INTEGER.fullmatch(raw) is None:
        raise _bad_type(name, f"expected an integer, got {raw[:40]!r}")
    if len(raw) > _INT_CHARS:
        raise _bad(name, f"must be between {minimum} and {maximum}, got {raw[:24]}...")
    value = int(raw)
    if not minimum <= value <= maximum:
        raise _bad(name, f"must be between {minimum} and {maximum}, got {value}")
    return value


def choice_arg(name: str, choices: tuple[str, ...]) -> str | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    if raw not in choices:
        raise _bad(name, f"unknown value {raw!r}; accepted: {', '.join(choices)}")
    return raw


def str_arg(name: str, *, max_length: int = TEXT_MAX) -> str | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > max_length:
        raise _bad(name, f"longer than {max_length} characters")
    return raw


def flag_arg(name: str) -> bool:
    """A flag: ``1``, ``true``, ``yes`` (any case) are true; absent, empty, ``0``, ``false``
    and ``no`` false; anything else is a 400 ``bad_type``."""
    raw = request.args.get(name, "").lower()
    if raw in TRUE_WORDS:
        return True
    if raw in FALSE_WORDS or raw == "":
        return False
    raise _bad_type(name, f"expected a boolean (true or false, 1 or 0), got {raw[:40]!r}")


def number_arg(name: str, *, minimum: float = 0) -> float | int | None:
    """An optional number (an integer stays an integer); 400 ``bad_type`` for a value that
    is not a number's text (``true``, ``nan``, ``1_0``)."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > 64 or _NUMBER.fullmatch(raw) is None:
        raise _bad_type(name, f"expected a number, got {raw[:40]!r}")
    value: float | int = int(raw) if _INTEGER.fullmatch(raw) else float(raw)
    if value != value or value in (float("inf"), float("-inf")):
        raise _bad(name, f"expected a finite number, got {raw!r}")
    if value < minimum:
        raise _bad(name, f"must be >= {minimum:g}, got {raw}")
    return value


def resume_seq() -> int | None:
    """Where an SSE follower resumes: ``Last-Event-ID`` or ``?since_seq=`` (a seq >= 0),
    None when neither is given; 400 ``bad_type`` for one that is not an integer,
    ``invalid_query`` for one out of range."""
    raw = request.headers.get("Last-Event-ID") or request.args.get("since_seq")
    if raw is None or raw == "":
        return None
    if _INTEGER.fullmatch(raw) is None:
        raise _bad_type("since_seq", f"expected a seq (an integer >= 0), got {raw[:40]!r}")
    value = int(raw) if len(raw) <= _INT_CHARS else -1
    if not 0 <= value <= INT64_MAX:
        raise Problem(
            400,
            "invalid_query",
            "Last-Event-ID / since_seq must be a seq (int >= 0)",
            [FieldProblem("since_seq", "invalid", "an integer >= 0")],
        )
    return value
