"""Every ``Admin`` and ``Manage`` row of the spec's endpoint tables, called with an org
owner's access token (a known caller, a manager of its org, not the operator): the status
the row lists for it (issue 37, docs/auth.md).

- ``Admin`` rows: 403 where the row lists 403 (node self-update, seat: "operator token
  required"), 401 where it lists only 401 (the token-admin routes and channel targets carry
  their own admin gate: "not an admin on admin routes");
- ``Manage`` rows: the row's success status, confined to the owner's own org.

The rows are copied from the spec (its Endpoints section), not read from the declarations,
so the declared rules and the handlers are checked against it; the route matrix
(tests/http/test_route_matrix.py) supplies each route's preparation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runplane.http.openapi.route_doc import rules_of
from tests.auth.support import bearer, mint
from tests.http import test_route_matrix as matrix

served = matrix.served  # the route matrix's world: orgs A and B, a webhook of org A, ...


@dataclass(frozen=True)
class Row:
    method: str
    path: str  # as the spec writes it
    auth: str  # Admin | Manage
    owner: int  # the status the row lists for an org owner


ROWS = (
    # Nodes
    Row("POST", "/v1/nodes/{id}/update", "Admin", 403),  # "403 requires admin token"
    Row("POST", "/v1/nodes/join-tokens", "Admin", 401),
    Row("GET", "/v1/nodes/join-tokens", "Admin", 401),
    Row("DELETE", "/v1/nodes/join-tokens/{id}", "Admin", 401),
    # Stacks, analytics, entitlements, policy
    Row("GET", "/v1/policy", "Manage", 200),
    Row("PUT", "/v1/policy", "Manage", 200),
    Row("GET", "/v1/policy/preview", "Manage", 200),
    Row("POST", "/v1/policy/preview", "Manage", 200),
    # Auth, tokens, identity, orgs
    Row("POST", "/v1/auth/tokens", "Admin", 401),
    Row("GET", "/v1/auth/tokens", "Admin", 401),
    Row("DELETE", "/v1/auth/tokens/{id}", "Admin", 401),
    Row("POST", "/v1/auth/seat", "Admin", 403),  # "403; 404"
    # Git, admin, webhooks
    Row("GET", "/v1/admin/audit", "Manage", 200),
    Row("POST", "/v1/admin/channel-target", "Admin", 401),
    Row("GET", "/v1/admin/channel-target", "Admin", 401),
    Row("POST", "/v1/webhooks", "Manage", 201),
    Row("GET", "/v1/webhooks", "Manage", 200),
    Row("DELETE", "/v1/webhooks/{id}", "Manage", 200),
    Row("POST", "/v1/webhooks/{id}/test", "Manage", 202),
    Row("GET", "/v1/webhooks/{id}/deliveries", "Manage", 200),
)

#: The spec's path parameter as this app names it, per route.
URL_RULES = {
    "/v1/nodes/{id}/update": "/v1/nodes/<node_id>/update",
    "/v1/nodes/join-tokens/{id}": "/v1/nodes/join-tokens/<token_id>",
    "/v1/auth/tokens/{id}": "/v1/auth/tokens/<token_id>",
    "/v1/webhooks/{id}": "/v1/webhooks/<webhook_id>",
    "/v1/webhooks/{id}/test": "/v1/webhooks/<webhook_id>/test",
    "/v1/webhooks/{id}/deliveries": "/v1/webhooks/<webhook_id>/deliveries",
}


def url_rule(row: Row) -> str:
    return URL_RULES.get(row.path, row.path)


def test_the_rows_are_the_specs() -> None:
    assert len(ROWS) == 20
    assert sum(r.auth == "Admin" for r in ROWS) == 10
    assert len({(r.method, r.path) for r in ROWS}) == len(ROWS)


async def test_the_declared_rules_match_the_rows(served: Any) -> None:
    app = served[0]
    rules = rules_of(app)
    for row in ROWS:
        need = rules[(row.method, url_rule(row))].need
        if row.auth == "Manage":
            assert need == "manage", row
        else:  # the admin token only: 401 for every other caller, or 403 for a known one
            assert need == ("operator" if row.owner == 403 else "admin"), (row, need)


async def test_an_org_owner_gets_the_status_each_row_lists(served: Any) -> None:
    app, client, world = served
    owner = await mint(client, subject="olga", org_id=world.org_a, role="owner")
    failures = []
    for row in ROWS:
        case = matrix.CASES[(row.method, url_rule(row))]
        ctx = matrix.Ctx(client, app, world, "owner")
        req = await case.prepare(ctx)
        kwargs: dict[str, Any] = {"method": row.method, "headers": bearer(owner["token"])}
        if req.json is not None:
            kwargs["json"] = req.json
        response = await client.open(req.path, **kwargs)
        body = await response.get_json()
        if response.status_code != row.owner:
            failures.append(f"{row.method} {row.path}: {response.status_code}, want {row.owner}")
        elif row.owner == 403:
            assert body["code"] == "operator_token_required", body
        elif row.owner == 401:
            assert body["code"] == "unauthorized", body
            assert response.headers["WWW-Authenticate"] == "Bearer"
        elif case.check is not None:
            case.check(ctx, body)  # confined to the owner's own org
    assert not failures, "\n".join(failures)
