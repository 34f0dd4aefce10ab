"""The strict check of the answers (tests): every JSON answer is exactly its declared model.

The response models of ``runplane/http/openapi/views/`` allow fields they do not name
(the published document promises clients that views may grow), so an answer could carry
fields the document never names without anybody noticing. With ``RUNPLANE_STRICT_VIEWS=1``
(``tests/conftest.py`` sets it) the app checks each JSON success answer of a route that
declares a response model after the route ran: the answer must validate against the
model and name no field the model (or a model inside it) does not, as if every model said
``extra="forbid"``. An answer that does not is replaced by a 500 problem naming the route
and the fields, so any test that calls the route fails on the drift. A route that
declares the bare ``View`` (the OpenAPI document, a JSON-RPC answer) promises any object
and is not checked; neither are errors (problems), event streams and other content.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from quart import Response, current_app, request

from runplane.http.openapi.route_doc import RouteDoc, doc_of
from runplane.http.openapi.views import View
from runplane.http.problems import problem_response

log = logging.getLogger("runplane.http")

#: The switch: "1" checks every answer (tests); production leaves it unset.
STRICT_ENV = "RUNPLANE_STRICT_VIEWS"


def strict_views() -> bool:
    return os.environ.get(STRICT_ENV, "").strip() == "1"


def _shapes(route: RouteDoc) -> list[Any]:
    """The shapes the answer may have: the model (one of them), a list of it for
    ``many``, and the page envelope ``?paginate=1`` gives."""
    assert route.response is not None
    models = route.response if isinstance(route.response, tuple) else (route.response,)
    shapes: list[Any] = [list[m] if route.many else m for m in models]  # type: ignore[valid-type]
    if route.page is not None:
        shapes.append(route.page)
    return shapes


@functools.cache
def _adapter(shape: Any) -> TypeAdapter[Any]:
    return TypeAdapter(shape)


def _extras(value: Any, at: str) -> Iterator[str]:
    """The paths of the fields that no model names, anywhere inside ``value``."""
    if isinstance(value, BaseModel):
        for name in value.__pydantic_extra__ or {}:
            yield at + name
        for name in type(value).model_fields:
            yield from _extras(getattr(value, name), f"{at}{name}.")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _extras(item, f"{at.rstrip('.')}[{index}].")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _extras(item, f"{at}{key}.")


def drift(route: RouteDoc, answer: Any) -> str | None:
    """Why ``answer`` is not exactly one of the route's declared shapes; None when it is."""
    found: list[str] = []
    for shape in _shapes(route):
        name = getattr(shape, "__name__", str(shape))
        try:
            value = _adapter(shape).validate_python(answer)
        except ValidationError as exc:
            errors = ", ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3]
            )
            found.append(f"not a {name} ({errors})")
            continue
        extra = list(_extras(value, ""))
        if not extra:
            return None
        found.append(f"fields {name} does not name: {', '.join(extra)}")
    return "; ".join(found)


async def check_answer(response: Response) -> Response:
    """``after_request`` hook (strict mode): a 500 problem for an answer that drifted
    from its route's declared model."""
    url_rule = request.url_rule
    if url_rule is None or response.mimetype != "application/json":
        return response
    route = doc_of(current_app.view_functions.get(url_rule.endpoint))
    if route is None or route.response is None or route.content != "json":
        return response
    if route.response is View:  # any object (the OpenAPI document, a JSON-RPC answer)
        return response
    if response.status_code not in (route.status, *route.also):
        return response
    answer = json.loads(await response.get_data(as_text=True))
    return drift_answer(route, f"{request.method} {url_rule.rule}", answer) or response


def drift_answer(route: RouteDoc, where: str, answer: Any) -> Response | None:
    """The 500 for a success ``answer`` of ``route`` (``where``: its method and rule) that
    drifted from its declared model; None when it did not."""
    why = drift(route, answer)
    if why is None:
        return None
    log.error("answer drifted from its model", extra={"route": where, "drift": why})
    return problem_response(
        500,
        "answer_drift",
        f"{where} answered what its declared response model does not describe: {why} "
        "(name the fields in runplane/http/openapi/views/, or fix the answer)",
    )
