"""Database-native identity: users (``usr_``), orgs (``org_``), memberships, login tokens
(``rpl_``) and login sessions (``rps_``). See docs/auth.md.

Only with a database (``store.supports_identity``); the routes answer 404 otherwise.

- **Seating** a user (operator) creates the user and a personal org it owns, and issues a
  login token for that org. Seating an existing email adds nothing and issues nothing.
- **Adding a member** to an org creates the user (with its personal org and a login token
  for the org it was added to) when the email is new, else just adds the membership.
- A **login token** is single-use and expires after :data:`LOGIN_TOKEN_TTL_MS`; exchanging
  it (``POST /v1/auth/token``) creates a **login session** whose secret is returned once,
  expires after :data:`SESSION_TTL_MS` and is revoked by logout. Both are stored only as
  SHA-256 hashes and compared in constant time.
- A session acts in its org with the role the user holds there *now* (looked up on every
  request): removing the member or changing its role takes effect on the next request.
  ``X-Runplane-Org`` lets a session act in another org the user belongs to.
- Role rules: an org admin may grant member/viewer only and may not change or remove an
  owner or admin; the last owner of an org cannot be removed or demoted (409).

Functions raise :class:`~runplane.problems.Problem` (404 / 403 / 409 / 400) for the
answers the routes give, and :class:`InvalidCredential` for bad login/session secrets.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from runplane.auth.principal import InvalidCredential, Principal
from runplane.auth.roles import PRIVILEGED_ROLES, ROLE_NAMES, bundle
from runplane.ids import hash_secret, new_id, new_secret, secrets_equal
from runplane.persistence import Row, Store, Tx
from runplane.problems import FieldProblem, Problem, not_found
from runplane.runtime import clock
from runplane.timefmt import iso_ms

log = logging.getLogger("runplane.auth")

USER_ID_PREFIX = "usr_"
ORG_ID_PREFIX = "org_"
LOGIN_TOKEN_ID_PREFIX = "lgt_"
LOGIN_TOKEN_PREFIX = "rpl_"
SESSION_ID_PREFIX = "lgs_"
SESSION_PREFIX = "rps_"

DAY_MS = 86_400_000
LOGIN_TOKEN_TTL_MS = 7 * DAY_MS
SESSION_TTL_MS = 7 * DAY_MS
NAME_MAX = 200
EMAIL_MAX = 254

#: Who is granting: the operator, or the caller's role in the org.
SUPERUSER = "superuser"

_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")
_SLUG_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")

LOGIN_NOTE = (
    "Give this login token to the user: it is shown only once, works once and expires in "
    '7 days. Exchange it with POST /v1/auth/token {"token": ...} for a session token.'
)
SESSION_NOTE = (
    "Store this session token now: it is shown only once. Send it as "
    "`Authorization: Bearer <token>`; it expires at expires_at; POST /v1/auth/logout ends it."
)


def _now() -> int:
    return int(clock.wall() * 1000)


class IdentityUser(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    email: str
    name: str
    status: str
    created_at: str


class Org(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    kind: str  # personal | team
    name: str
    slug: str
    created_at: str


@dataclass(frozen=True, slots=True)
class Seated:
    user: IdentityUser
    org_id: str
    created: bool
    login_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class MemberAdded:
    user: IdentityUser
    role: str
    created: bool  # a new user (then login_token is set)
    changed: bool  # membership created or its role changed
    login_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class SessionGranted:
    session_id: str
    session_token: str = field(repr=False)
    expires_at: int = 0
    user_id: str = ""
    org_id: str = ""
    role: str = ""

    def result(self) -> dict[str, Any]:
        """The spec's SessionResult (the only time the session token is shown)."""
        return {
            "session_token": self.session_token,
            "expires_at": iso_ms(self.expires_at),
            "user_id": self.user_id,
            "org_id": self.org_id,
            "role": self.role,
            "scopes": list(bundle(self.role)),
            "note": SESSION_NOTE,
        }


# --- checks -------------------------------------------------------------------------------


def _bad(key: str, message: str) -> Problem:
    return Problem(400, "invalid", message, [FieldProblem(key, "invalid", message)])


def normalize_email(email: str) -> str:
    value = email.strip().lower()
    if len(value) > EMAIL_MAX or not _EMAIL_RE.match(value):
        raise _bad("email", "email must look like name@host (at most 254 characters)")
    return value


def _clean_name(name: str | None, default: str) -> str:
    value = (name or "").strip() or default
    if len(value) > NAME_MAX:
        raise _bad("name", f"name is {len(value)} characters; at most {NAME_MAX} are accepted")
    return value


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:63].strip("-")
    return slug or "org"


def check_role(role: str) -> str:
    if role not in ROLE_NAMES:
        raise _bad("role", f"unknown role {role!r}; accepted: {', '.join(ROLE_NAMES)}")
    return role


# --- rows -> views ------------------------------------------------------------------------


def _user(row: Row) -> IdentityUser:
    return IdentityUser(
        id=row["id"],
        email=row["email"],
        name=row["name"],
        status=row["status"],
        created_at=iso_ms(int(row["created_at"])),
    )


def _org(row: Row) -> Org:
    return Org(
        id=row["id"],
        kind=row["kind"],
        name=row["name"],
        slug=row["slug"],
        created_at=iso_ms(int(row["created_at"])),
    )


def _org_from(row: Row, prefix: str) -> Org:
    return _org({k: row[prefix + k] for k in ("id", "kind", "name", "slug", "created_at")})


# --- writes inside one transaction ----------------------------------------------------------


def _insert_user(tx: Tx, email: str, name: str, now: int) -> tuple[Row, str]:
    """A new user and its personal org (owned by it); returns (user row, personal org id)."""
    user_id = new_id(USER_ID_PREFIX)
    org_id = new_id(ORG_ID_PREFIX)
    tx.execute(
        "INSERT INTO users (id, email, name, status, created_at) VALUES (?, ?, ?, 'active', ?)",
        (user_id, email, name, now),
    )
    slug = f"{slugify(email.split('@', 1)[0])[:50]}-{org_id[-8:]}"
    tx.execute(
        "INSERT INTO orgs (id, kind, name, slug, created_at) VALUES (?, 'personal', ?, ?, ?)",
        (org_id, name, slug, now),
    )
    tx.execute(
        "INSERT INTO org_members (org_id, user_id, role, joined_at) VALUES (?, ?, 'owner', ?)",
        (org_id, user_id, now),
    )
    row = {"id": user_id, "email": email, "name": name, "status": "active", "created_at": now}
    return row, org_id


def _insert_login_token(tx: Tx, user_id: str, org_id: str, now: int) -> str:
    secret = new_secret(LOGIN_TOKEN_PREFIX)
    tx.execute(
        "INSERT INTO login_tokens (id, secret_hash, user_id, org_id, created_at, expires_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (
            new_id(LOGIN_TOKEN_ID_PREFIX),
            hash_secret(secret),
            user_id,
            org_id,
            now,
            now + LOGIN_TOKEN_TTL_MS,
        ),
    )
    return secret


def _owner_count(tx: Tx, org_id: str) -> int:
    row = tx.fetchone(
        "SELECT count(*) AS n FROM org_members WHERE org_id = ? AND role = 'owner'", (org_id,)
    )
    return int(row["n"]) if row else 0


def _may_touch(granter: str, current: str | None, wanted: str | None) -> None:
    """403 unless ``granter`` may move a member from role ``current`` to ``wanted``
    (None: absent). Owners and the operator may do anything; admins only below them."""
    if granter in (SUPERUSER, "owner"):
        return
    if granter != "admin":
        raise Problem(403, "insufficient_role", "managing members needs the owner or admin role")
    if wanted in PRIVILEGED_ROLES:
        raise Problem(
            403,
            "insufficient_role",
            f"an org admin may not grant the {wanted} role; ask an owner",
        )
    if current in PRIVILEGED_ROLES:
        raise Problem(
            403,
            "insufficient_role",
            f"an org admin may not change or remove an {current}; ask an owner",
        )


def _last_owner() -> Problem:
    return Problem(
        409,
        "last_owner",
        "this is the org's last owner: make another member owner first",
    )


# --- operations ---------------------------------------------------------------------------


async def seat(store: Store, *, name: str | None, email: str) -> Seated:
    """Seat a user (operator): a new user with its personal org and a login token for it.
    An existing email is returned as is, without a credential."""
    address = normalize_email(email)
    display = _clean_name(name, address.split("@", 1)[0])
    now = _now()

    def run(tx: Tx) -> Seated:
        existing = tx.fetchone("SELECT * FROM users WHERE email = ?", (address,))
        if existing is not None:
            personal = tx.fetchone(
                "SELECT o.id FROM orgs o JOIN org_members m ON m.org_id = o.id "
                "WHERE m.user_id = ? AND o.kind = 'personal' ORDER BY o.created_at LIMIT 1",
                (existing["id"],),
            )
            org_id = personal["id"] if personal else ""
            return Seated(user=_user(existing), org_id=org_id, created=False)
        row, org_id = _insert_user(tx, address, display, now)
        secret = _insert_login_token(tx, row["id"], org_id, now)
        return Seated(user=_user(row), org_id=org_id, created=True, login_token=secret)

    seated = await store.transaction(run)
    if seated.created:
        log.info("user seated", extra={"user_id": seated.user.id, "org_id": seated.org_id})
    return seated


async def get_org(store: Store, org_id: str) -> Org | None:
    row = await store.fetchone("SELECT * FROM orgs WHERE id = ?", (org_id,))
    return None if row is None else _org(row)


async def create_org(store: Store, *, user_id: str, name: str, slug: str | None) -> Org:
    """A team org owned by ``user_id``. 400 bad name/slug, 409 slug taken."""
    display = _clean_name(name, "")
    if not display:
        raise Problem(
            400,
            "missing_field",
            "field 'name' is required",
            [FieldProblem("name", "missing_field", "field 'name' is required")],
        )
    wanted = (slug or "").strip().lower() or slugify(display)
    if not _SLUG_RE.match(wanted):
        raise _bad("slug", "slug must be 1-64 of a-z, 0-9 and '-', not starting or ending with '-'")
    org_id = new_id(ORG_ID_PREFIX)
    now = _now()

    def run(tx: Tx) -> None:
        if tx.fetchone("SELECT id FROM orgs WHERE slug = ?", (wanted,)) is not None:
            raise Problem(409, "slug_taken", f"an org with slug {wanted!r} exists; pick another")
        tx.execute(
            "INSERT INTO orgs (id, kind, name, slug, created_at) VALUES (?, 'team', ?, ?, ?)",
            (org_id, display, wanted, now),
        )
        tx.execute(
            "INSERT INTO org_members (org_id, user_id, role, joined_at) VALUES (?, ?, 'owner', ?)",
            (org_id, user_id, now),
        )

    await store.transaction(run)
    log.info("org created", extra={"org_id": org_id, "user_id": user_id})
    return Org(id=org_id, kind="team", name=display, slug=wanted, created_at=iso_ms(now))


async def memberships(store: Store, user_id: str) -> list[dict[str, Any]]:
    """OrgMembership[] ``{org, role}`` of a user, oldest membership first."""
    rows = await store.fetchall(
        "SELECT o.id AS o_id, o.kind AS o_kind, o.name AS o_name, o.slug AS o_slug, "
        "o.created_at AS o_created_at, m.role FROM org_members m JOIN orgs o ON o.id = m.org_id "
        "WHERE m.user_id = ? ORDER BY m.joined_at, o.id",
        (user_id,),
    )
    return [{"org": _org_from(r, "o_").model_dump(), "role": r["role"]} for r in rows]


async def list_members(store: Store, org_id: str) -> list[dict[str, Any]]:
    """OrgMember[] ``{user_id, name, email, role, joined_at}``, oldest first. 404 unknown org."""
    if await get_org(store, org_id) is None:
        raise not_found("org")
    rows = await store.fetchall(
        "SELECT u.id, u.name, u.email, m.role, m.joined_at FROM org_members m "
        "JOIN users u ON u.id = m.user_id WHERE m.org_id = ? ORDER BY m.joined_at, u.id",
        (org_id,),
    )
    return [
        {
            "user_id": r["id"],
            "name": r["name"],
            "email": r["email"],
            "role": r["role"],
            "joined_at": iso_ms(int(r["joined_at"])),
        }
        for r in rows
    ]


async def add_member(
    store: Store, org_id: str, *, name: str | None, email: str, role: str, granter: str
) -> MemberAdded:
    """Add (or re-role) a member. ``granter``: SUPERUSER or the caller's role in the org.
    A new email creates the user (personal org + a login token for ``org_id``)."""
    check_role(role)
    address = normalize_email(email)
    display = _clean_name(name, address.split("@", 1)[0])
    now = _now()

    def run(tx: Tx) -> MemberAdded:
        if tx.fetchone("SELECT id FROM orgs WHERE id = ?", (org_id,)) is None:
            raise not_found("org")
        user = tx.fetchone("SELECT * FROM users WHERE email = ?", (address,))
        if user is None:
            _may_touch(granter, None, role)
            row, _personal = _insert_user(tx, address, display, now)
            tx.execute(
                "INSERT INTO org_members (org_id, user_id, role, joined_at) VALUES (?, ?, ?, ?)",
                (org_id, row["id"], role, now),
            )
            secret = _insert_login_token(tx, row["id"], org_id, now)
            return MemberAdded(_user(row), role, created=True, changed=True, login_token=secret)
        current = tx.fetchone(
            "SELECT role FROM org_members WHERE org_id = ? AND user_id = ?", (org_id, user["id"])
        )
        if current is None:
            _may_touch(granter, None, role)
            tx.execute(
                "INSERT INTO org_members (org_id, user_id, role, joined_at) VALUES (?, ?, ?, ?)",
                (org_id, user["id"], role, now),
            )
            return MemberAdded(_user(user), role, created=False, changed=True)
        if current["role"] == role:
            return MemberAdded(_user(user), role, created=False, changed=False)
        _may_touch(granter, current["role"], role)
        if current["role"] == "owner" and _owner_count(tx, org_id) <= 1:
            raise _last_owner()
        tx.execute(
            "UPDATE org_members SET role = ? WHERE org_id = ? AND user_id = ?",
            (role, org_id, user["id"]),
        )
        return MemberAdded(_user(user), role, created=False, changed=True)

    added = await store.transaction(run)
    if added.changed:
        log.info(
            "member added",
            extra={"org_id": org_id, "user_id": added.user.id, "role": role},
        )
    return added


async def remove_member(store: Store, org_id: str, user_id: str, *, granter: str) -> str:
    """Remove a member; returns the role it had. 404 unknown org or not a member, 403 by the
    role rules, 409 for the last owner."""

    def run(tx: Tx) -> str:
        if tx.fetchone("SELECT id FROM orgs WHERE id = ?", (org_id,)) is None:
            raise not_found("org")
        current = tx.fetchone(
            "SELECT role FROM org_members WHERE org_id = ? AND user_id = ?", (org_id, user_id)
        )
        if current is None:
            raise not_found("member")
        _may_touch(granter, current["role"], None)
        if current["role"] == "owner" and _owner_count(tx, org_id) <= 1:
            raise _last_owner()
        tx.execute("DELETE FROM org_members WHERE org_id = ? AND user_id = ?", (org_id, user_id))
        return str(current["role"])

    role = await store.transaction(run)
    log.info("member removed", extra={"org_id": org_id, "user_id": user_id, "role": role})
    return role


async def member_role(store: Store, org_id: str, user_id: str) -> str | None:
    row = await store.fetchone(
        "SELECT role FROM org_members WHERE org_id = ? AND user_id = ?", (org_id, user_id)
    )
    return None if row is None else str(row["role"])


def _usable_login_token(tx: Tx, presented: str, now: int) -> tuple[Row, Row]:
    """The login token of hash ``presented`` and its user's membership, if it may be used
    now; InvalidCredential otherwise (unknown, revoked, used, expired, user gone)."""
    row = tx.fetchone(
        "SELECT id, secret_hash, user_id, org_id, expires_at, used_at, revoked_at "
        "FROM login_tokens WHERE secret_hash = ?",
        (presented,),
    )
    if row is None or not secrets_equal(row["secret_hash"], presented):
        raise InvalidCredential("unknown login token")
    if row["revoked_at"] is not None:
        raise InvalidCredential(f"login token {row['id']} was revoked")
    if row["used_at"] is not None:
        raise InvalidCredential(f"login token {row['id']} was already used")
    if int(row["expires_at"]) <= now:
        raise InvalidCredential(f"login token {row['id']} expired")
    member = tx.fetchone(
        "SELECT role FROM org_members WHERE org_id = ? AND user_id = ?",
        (row["org_id"], row["user_id"]),
    )
    if member is None:
        raise InvalidCredential(f"login token {row['id']}: the user left its org")
    return row, member


async def exchange(store: Store, login_token: str) -> SessionGranted:
    """Trade a login token (once) for a session. InvalidCredential when the token is
    unknown, used, revoked or expired, or its user left the org."""
    presented = hash_secret(login_token)
    session_secret = new_secret(SESSION_PREFIX)
    session_id = new_id(SESSION_ID_PREFIX)
    now = _now()

    def run(tx: Tx) -> SessionGranted:
        row, member = _usable_login_token(tx, presented, now)
        # Conditional: of two racing exchanges (two servers) only one uses the token.
        if not tx.execute(
            "UPDATE login_tokens SET used_at = ? WHERE id = ? AND used_at IS NULL",
            (now, row["id"]),
        ):
            raise InvalidCredential(f"login token {row['id']} was already used")
        expires = now + SESSION_TTL_MS
        tx.execute(
            "INSERT INTO login_sessions (id, secret_hash, user_id, org_id, login_token_id,"
            " created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                session_id,
                hash_secret(session_secret),
                row["user_id"],
                row["org_id"],
                row["id"],
                now,
                expires,
            ),
        )
        return SessionGranted(
            session_id=session_id,
            session_token=session_secret,
            expires_at=expires,
            user_id=row["user_id"],
            org_id=row["org_id"],
            role=member["role"],
        )

    granted = await store.transaction(run)
    log.info(
        "login session created",
        extra={
            "session_id": granted.session_id,
            "user_id": granted.user_id,
            "org_id": granted.org_id,
        },
    )
    return granted


async def verify_session(store: Store, secret: str, *, org_id: str | None = None) -> Principal:
    """The principal of a live session, acting in its org (or ``org_id``, another org of the
    user). InvalidCredential if unknown, revoked or expired, or the user left the org;
    Problem 403 ``not_a_member`` when ``org_id`` is not one of the user's orgs."""
    presented = hash_secret(secret)
    row = await store.fetchone(
        "SELECT s.id, s.secret_hash, s.user_id, s.org_id, s.expires_at, s.revoked_at, "
        "u.name, u.status FROM login_sessions s JOIN users u ON u.id = s.user_id "
        "WHERE s.secret_hash = ?",
        (presented,),
    )
    if row is None or not secrets_equal(row["secret_hash"], presented):
        raise InvalidCredential("unknown session token")
    if row["revoked_at"] is not None:
        raise InvalidCredential(f"session {row['id']} was ended (logout)")
    if int(row["expires_at"]) <= _now():
        raise InvalidCredential(f"session {row['id']} expired; log in again")
    if row["status"] != "active":
        raise InvalidCredential(f"user {row['user_id']} is {row['status']}")
    acting = org_id or row["org_id"]
    role = await member_role(store, acting, row["user_id"])
    if role is None:
        if acting == row["org_id"]:
            raise InvalidCredential(f"session {row['id']}: the user is no longer in its org")
        raise Problem(
            403,
            "not_a_member",
            f"the session's user is not a member of org {acting!r} (X-Runplane-Org)",
        )
    return Principal(
        kind="user",
        subject=row["user_id"],
        org_id=acting,
        read_org=acting,
        name=row["name"],
        scopes=bundle(role),
        role=role,
        credential="session",
        credential_id=row["id"],
    )


async def logout(store: Store, secret: str) -> str | None:
    """End the session whose token this is; its id, or None when there is no such live
    session (logout is idempotent)."""
    presented = hash_secret(secret)
    row = await store.fetchone(
        "SELECT id, secret_hash FROM login_sessions WHERE secret_hash = ? AND revoked_at IS NULL",
        (presented,),
    )
    if row is None or not secrets_equal(row["secret_hash"], presented):
        return None
    await store.execute(
        "UPDATE login_sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
        (_now(), row["id"]),
    )
    log.info("login session ended", extra={"session_id": row["id"]})
    return str(row["id"])
