"""What a route says about itself for the OpenAPI document: ``@doc(...)`` on the view.

The decorator records the request body model (the one the route hands to
``parse_body``; a test checks they agree), the response model and status, the kind of
content (JSON, an event stream, bytes, a page, a redirect, nothing) and the error
statuses the route raises beyond those its auth rule, path, query and body imply (see
:func:`runplane.http.openapi.document.error_statuses`). Nothing else is written by hand:
the schemas come from the pydantic models, the parameters from the url rule and
``@accepts_query``, the security from the auth rule table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel

#: The attribute ``doc`` puts on a view function.
DOC_ATTR = "runplane_openapi"

Content = Literal["json", "sse", "bytes", "html", "redirect", "empty", "text"]
V = TypeVar("V", bound=Callable[..., object])


@dataclass(frozen=True, slots=True)
class RouteDoc:
    summary: str
    response: type[BaseModel] | tuple[type[BaseModel], ...] | None = None
    #: the response is a JSON array of ``response``
    many: bool = False
    #: a list that ``?paginate=1`` turns into this page envelope instead
    page: type[BaseModel] | None = None
    status: int = 200
    #: other success statuses with the same body (201 created / 200 replaced, ...)
    also: tuple[int, ...] = ()
    content: Content = "json"
    body: type[BaseModel] | None = None
    #: the body may be left out (the model's defaults apply)
    body_optional: bool = False
    errors: tuple[int, ...] = ()
    description: str = ""
    #: the event names of an event stream (``content="sse"``)
    events: tuple[str, ...] = ()


def doc(
    summary: str,
    response: type[BaseModel] | tuple[type[BaseModel], ...] | None = None,
    *,
    many: bool = False,
    page: type[BaseModel] | None = None,
    status: int = 200,
    also: tuple[int, ...] = (),
    content: Content = "json",
    body: type[BaseModel] | None = None,
    body_optional: bool = False,
    errors: tuple[int, ...] = (),
    description: str = "",
    events: tuple[str, ...] = (),
) -> Callable[[V], V]:
    """Describe a route for the OpenAPI document (put it under the route decorator)."""
    record = RouteDoc(
        summary=summary,
        response=response,
        many=many,
        page=page,
        status=status,
        also=also,
        content=content,
        body=body,
        body_optional=body_optional,
        errors=errors,
        description=description,
        events=events,
    )

    def mark(view: V) -> V:
        setattr(view, DOC_ATTR, record)
        return view

    return mark


def doc_of(view: object) -> RouteDoc | None:
    found = getattr(view, DOC_ATTR, None)
    return found if isinstance(found, RouteDoc) else None
