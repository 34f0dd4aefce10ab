"""Roles, scope bundles, MintBody scope semantics, the Rule type and the pure decision
function, table-driven (no app, no store; the routes' declared rules are checked in
tests/http/test_route_matrix.py)."""

from __future__ import annotations

import pytest

from runplane.auth.access import decide
from runplane.auth.principal import ADMIN, NO_ORG, Principal, anonymous
from runplane.auth.roles import ROLES, SCOPES, normalize_scopes, role_catalog
from runplane.auth.rules import Rule, scope
from runplane.auth.tokens import resolve_scopes


def token(role: str | None = None, scopes: tuple[str, ...] = (), org: str = "org_a") -> Principal:
    return Principal(
        kind="user",
        subject="s",
        org_id=org,
        read_org=org,
        scopes=scopes if role is None else ROLES[role],
        role=role,
        credential="token",
        credential_id="tok_x",
    )


def session(role: str) -> Principal:
    return Principal(
        kind="user",
        subject="usr_x",
        org_id="org_a",
        read_org="org_a",
        scopes=ROLES[role],
        role=role,
        credential="session",
        credential_id="lgs_x",
    )


def test_role_catalog_is_fixed_and_documented() -> None:
    assert [r["name"] for r in role_catalog()] == ["owner", "admin", "member", "viewer"]
    assert ROLES["owner"] == ROLES["admin"] == ("*",)
    assert ROLES["member"] == (
        "runs:submit",
        "runs:cancel",
        "runs:priority",
        "runs:share",
        "git:read",
    )
    assert ROLES["viewer"] == ()
    for scopes in ROLES.values():
        assert set(scopes) <= set(SCOPES)


def test_spec_scopes() -> None:
    assert set(SCOPES) == {
        "*",
        "runs:submit",
        "runs:cancel",
        "runs:priority",
        "runs:manage",
        "runs:share",
        "nodes:grant",
        "git:connect",
        "git:read",
    }


@pytest.mark.parametrize(
    ("kind", "role", "scopes", "held"),
    [
        ("user", "member", None, ROLES["member"]),
        ("service", "owner", None, ("*",)),
        (
            "user",
            None,
            ["runs:cancel", "runs:submit", "runs:submit"],
            ("runs:submit", "runs:cancel"),
        ),
        ("user", None, ["runs:submit", "*"], ("*",)),
        ("user", None, [], ()),
        ("user", None, None, ("*",)),  # a user with neither: *
        ("service", None, None, ()),  # a service with neither: read-only
    ],
)
def test_mint_scope_semantics(
    kind: str, role: str | None, scopes: list[str] | None, held: tuple[str, ...]
) -> None:
    assert resolve_scopes(kind, role, scopes) == held


@pytest.mark.parametrize(
    ("role", "scopes", "message"),
    [
        ("member", ["runs:submit"], "not both"),
        ("superhero", None, "unknown role"),
        (None, ["runs:fly"], "unknown scope 'runs:fly'"),
    ],
)
def test_mint_scope_errors(role: str | None, scopes: list[str] | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_scopes("user", role, scopes)


def test_normalize_keeps_catalog_order() -> None:
    assert normalize_scopes(["git:read", "runs:submit"]) == ("runs:submit", "git:read")


def test_a_scope_rule_names_its_scope() -> None:
    with pytest.raises(ValueError):
        Rule("scope")
    with pytest.raises(ValueError):
        Rule("read", scope="runs:submit")


def test_only_a_public_rule_leaves_the_credential_to_its_handler() -> None:
    with pytest.raises(ValueError):
        Rule("read", reads_credential=True)
    assert Rule("public", reads_credential=True).reads_credential


ANON_OPEN = anonymous(sees_all=True)
ANON_CLOSED = anonymous(sees_all=False)

#: (rule, principal, mode) -> expected status (None = allowed)
CASES = [
    # public: nobody without a credential refused; a bad one is 401 in every mode, but
    # where the handler reads the credential itself
    (Rule("public"), ANON_CLOSED, "required", None, None),
    (Rule("public"), ANON_OPEN, "off", None, None),
    (Rule("public"), ANON_CLOSED, "required", "unknown access token", 401),
    (Rule("public"), ANON_OPEN, "off", "not 'Bearer <token>'", 401),
    (Rule("public", reads_credential=True), ANON_OPEN, "off", "not a token", None),
    (Rule("public", reads_credential=True), ANON_CLOSED, "required", "not a token", None),
    # read
    (Rule("read"), ANON_OPEN, "off", None, None),
    (Rule("read"), ANON_CLOSED, "required", None, 401),
    (Rule("read"), token("viewer"), "required", None, None),
    (Rule("read"), ANON_OPEN, "off", "access token tok_x was revoked", 401),
    # scope
    (scope("runs:submit"), ANON_OPEN, "off", None, None),
    (scope("runs:submit"), ANON_CLOSED, "required", None, 401),
    (scope("runs:submit"), token("viewer"), "off", None, 403),  # real token lacking scope
    (scope("runs:submit"), token("member"), "required", None, None),
    (scope("runs:manage"), token("member"), "required", None, 403),
    (scope("nodes:grant"), token("admin"), "required", None, None),  # via *
    (scope("runs:cancel"), ADMIN, "required", None, None),
    # manage
    (Rule("manage"), ANON_OPEN, "off", None, 401),
    (Rule("manage"), token("member"), "off", None, 403),
    (Rule("manage"), token(None, ("*",)), "off", None, 403),  # * is not a role
    (Rule("manage"), token("admin"), "required", None, None),
    (Rule("manage"), session("owner"), "required", None, None),
    (Rule("manage"), ADMIN, "required", None, None),
    # admin / operator
    (Rule("admin"), ANON_OPEN, "off", None, 401),
    (Rule("admin"), token("owner"), "off", None, 401),
    (Rule("admin"), ADMIN, "required", None, None),
    (Rule("admin"), ANON_OPEN, "off", "not a token this server issued", 401),
    (Rule("operator"), ANON_OPEN, "off", None, 401),
    (Rule("operator"), ANON_OPEN, "off", "not a token this server issued", 401),
    (Rule("operator"), token("owner"), "off", None, 403),
    (Rule("operator"), ADMIN, "off", None, None),
    # user session
    (Rule("user_session"), ANON_OPEN, "off", None, 401),
    (Rule("user_session"), token("owner"), "off", None, 403),
    (Rule("user_session"), ADMIN, "off", None, 403),
    (Rule("user_session"), session("viewer"), "required", None, None),
    # every scope
    (scope("*"), ANON_OPEN, "off", None, None),
    (scope("*"), ANON_CLOSED, "required", None, 401),
    (scope("*"), token("member"), "off", None, 403),
    (scope("*"), token("owner"), "off", None, None),
]


@pytest.mark.parametrize(("rule", "principal", "mode", "invalid", "status"), CASES)
def test_decide(
    rule: Rule, principal: Principal, mode: str, invalid: str | None, status: int | None
) -> None:
    denial = decide(rule, principal, mode=mode, invalid=invalid)
    assert (denial.status if denial else None) == status, denial


@pytest.mark.parametrize(
    ("standing", "status", "code"),
    [
        (None, 404, "not_found"),
        ("member", 403, "insufficient_role"),
        ("none", 403, None),
        ("admin", None, None),
        ("owner", None, None),
    ],
)
def test_decide_org_manage(standing: str | None, status: int | None, code: str | None) -> None:
    denial = decide(Rule("org_manage"), token("member"), mode="required", org_role=standing)
    assert (denial.status if denial else None) == status
    if code:
        assert denial is not None and denial.code == code


def test_admin_not_configured_says_so() -> None:
    denial = decide(Rule("admin"), ANON_OPEN, mode="off", admin_configured=False)
    assert denial is not None and "RUNPLANE_ADMIN_TOKEN" in denial.detail


def test_anonymous_read_org() -> None:
    assert ANON_OPEN.read_org is None  # open deploy: sees everything
    assert ANON_CLOSED.read_org == NO_ORG  # required: reads nothing org-owned
    assert ANON_OPEN.org_id == "org_default"
    assert ADMIN.read_org is None and ADMIN.superuser
