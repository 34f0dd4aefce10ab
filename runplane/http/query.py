"""Query-string parsing with problems that name the parameter.

Unknown parameters are refused: every route declares the parameters it reads with
``@accepts_query(...)`` (none when it has no declaration), and :func:`check_query`, a
``before_request`` hook that runs after the auth hook, answers 400 naming each other one,
the accepted ones and the close one (``?status=`` on a route that filters by ``phase`` must
not silently list everything). ``token`` is accepted where the route's auth rule takes
``?token=``. A route marked ``@ignores_query`` is not checked (its docstring says why),
nor is Quart's ``static`` route (cache-busting parameters on files are common and harmless).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import TypeVar

from quart import current_app, request

from runplane.http.openapi.route_doc import doc_of
from runplane.problems import FieldProblem, Problem
from runplane.suggest import accepted_phrase

#: The attribute ``accepts_query`` puts on a view function (None: not checked).
QUERY_ATTR = "runplane_query_params"
#: The query parameter that carries a credential where the route's auth rule allows it.
TOKEN_PARAM = "token"
#: Endpoints never checked: Quart's static files.
UNCHECKED_ENDPOINTS = frozenset({"static"})

V = TypeVar("V", bound=Callable[..., object])


def accepts_query(*names: str) -> Callable[[V], V]:
    """Declare the query parameters a route reads; any other one is a 400."""

    def mark(view: V) -> V:
        setattr(view, QUERY_ATTR, names)
        return view

    return mark


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


def _bad(name: str, message: str) -> Problem:
    return Problem(
        400, "invalid_query", f"{name}: {message}", [FieldProblem(name, "invalid", message)]
    )


def _bad_type(name: str, message: str) -> Problem:
    """A query value that is not of the parameter's type (``?limit=true``): 400 ``bad_type``
    naming the parameter, as a body's field of the wrong type is."""
    errors = [FieldProblem(name, "bad_type", message)]
    return Problem(400, "bad_type", f"{name}: {message}", errors)


#: An integer as a query value: ASCII digits, an optional minus (``int()`` would also take
#: ``+7``, `` 7 ``, ``1_000`` and other scripts' digits).
_INTEGER = re.compile(r"-?[0-9]+")
#: A number as a query value: a JSON number's text (no ``nan``, ``inf``, ``1_0``).
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
#: What a flag's value may be (case-insensitive); an empty value is false.
_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


#: The largest integer a query parameter may be when its route sets no maximum: what a
#: 64-bit column (or SQL ``LIMIT``/``OFFSET``) takes.
INT64_MAX = 2**63 - 1
#: Longest integer literal looked at: no work converting a 4,400-digit string.
_INT_CHARS = 20


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


def str_arg(name: str, *, max_length: int = 256) -> str | None:
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
    if raw in _TRUE:
        return True
    if raw in _FALSE or raw == "":
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
