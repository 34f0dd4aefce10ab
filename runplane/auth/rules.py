"""What a route requires: the :class:`Rule` type, the named rules and their meaning.

Each route declares its rule where it is defined, in its ``@doc(..., rule=...)``
(``runplane/http/openapi/route_doc.py``); the auth hook (``runplane/http/auth_hook.py``)
reads the matched view's declaration and enforces its rule before the route runs, and
answers 500 for a route that declares none (``tests/http/test_route_matrix.py`` reports
it too). ``HEAD`` rides on the ``GET`` route's rule and the automatic ``OPTIONS`` answer is
public. **Adding a route?** Give its ``@doc`` a ``rule=``, and add a case with the spec's
tier to CASES in tests/http/test_route_matrix.py (docs/architecture.md "Adding a route").

Requirements (see docs/auth.md for the full decision table):

- ``public``: nobody without a credential is refused (health, whoami, roles, login
  exchange/logout, uploads and artifacts, routes that authenticate in the handler). A
  credential that is presented and not valid is a 401 here too, as on every route, unless
  the rule says the handler reads it (``reads_credential``).
- ``read``: any principal; the anonymous caller only when auth is not ``required``.
  Reads are narrowed to the principal's org by the route (``current_caller().read_org``).
- ``scope``: like read, and a principal must hold ``scope`` (403 otherwise).
- ``manage``: the admin token or an org owner/admin (403 for other principals; 401 for
  the anonymous caller in every mode). Routes narrow a non-superuser to its own org.
- ``org_manage``: the admin token, or an owner/admin *of the org named by the route's
  ``org_id``*: a login session by its user's membership there, an access token by its
  role in its own org. A principal outside that org gets the 404 of an unknown org; one
  inside it with a lesser role 403; the anonymous caller 401.
- ``admin``: the operator admin token only (401 for anybody else, spec).
- ``operator``: the operator admin token only; other *authenticated* principals get 403
  ``operator_token_required`` (the spec's answer for seat and node update).
- ``user_session``: a login session (403 ``user_session_required`` for tokens).

``identity=True``: the route exists only with a database; 404 without one (memory store).
``query_token=True``: the credential may also come as ``?token=`` (browser EventSource).
``stream_ticket=True``: a stream ticket may stand in for the credential; the hook then
authenticates nobody and the route verifies the ticket (401 when it is not valid).
``reads_credential=True`` (public rules only): the handler reads the presented credential
itself (a metrics scraper's token, an agent's git fetch ticket as Basic auth, the session
logout ends, an agent's hello), so the hook does not refuse an ``Authorization`` header it
cannot resolve (everywhere else that is a 401, in every auth mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Need = Literal[
    "public", "read", "scope", "manage", "org_manage", "admin", "operator", "user_session"
]

WEBSOCKET = "WEBSOCKET"


@dataclass(frozen=True, slots=True)
class Rule:
    need: Need
    scope: str | None = None
    identity: bool = False
    query_token: bool = False
    #: a stream ticket (``?ticket=`` or ``Bearer rpst_...``) stands in for the credential;
    #: the route checks it (runplane/streams/tickets.py)
    stream_ticket: bool = False
    #: a share code or an embed token of the route's job (``?share=``/``X-Share-Token``,
    #: ``?embed=``/``X-Embed-Token``, or as the bearer) reads it when it allows one of
    #: these categories (runplane/auth/shares.py); () = no share reads this route
    shared: tuple[str, ...] = ()
    #: the handler reads the presented credential itself: an ``Authorization`` header the
    #: hook cannot resolve is left to it (public rules only)
    reads_credential: bool = False

    def __post_init__(self) -> None:
        if (self.need == "scope") != (self.scope is not None):
            raise ValueError("a scope rule names its scope, and only a scope rule does")
        if self.reads_credential and self.need != "public":
            raise ValueError("only a public rule leaves the credential to its handler")


PUBLIC = Rule("public")
READ = Rule("read")
MANAGE = Rule("manage")
ADMIN = Rule("admin")
OPERATOR = Rule("operator")
#: a public route whose handler authenticates the caller itself (``reads_credential``)
OWN_CREDENTIAL = Rule("public", reads_credential=True)


def scope(name: str) -> Rule:
    return Rule("scope", scope=name)


def methods_of(url_rule: object) -> list[str]:
    """The methods of a Quart url rule a route declares a rule for (HEAD rides on GET;
    automatic OPTIONS is public; a WebSocket rule counts as one ``WEBSOCKET``)."""
    if getattr(url_rule, "websocket", False):
        return [WEBSOCKET]
    methods = set(getattr(url_rule, "methods", None) or ())
    methods.discard("HEAD")
    if getattr(url_rule, "provide_automatic_options", False):
        methods.discard("OPTIONS")
    return sorted(methods)
