"""Registry credentials: an org's username and password for one registry
(``/v1/registries``, docs/containers.md "Registry credentials").

The password is sealed at rest (AES-256-GCM, the credential's id as associated data), never
shown, never logged: it is opened only to resolve an image at submit and to hand a node
the credential for one attempt's pull (the run order). One credential per registry and org.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, StringConstraints

from runplane.ids import new_id
from runplane.persistence import Store, now_ms
from runplane.problems import FieldProblem, Problem, not_found
from runplane.sealing import Sealer
from runplane.timefmt import iso_ms

from .client import Basic
from .reference import BadReference, registry_key

PREFIX = "rgc_"
_COLUMNS = "id, org_id, registry, username, secret, created_by, created_at"


class RegistryCredentialBody(BaseModel):
    """RegistryCredentialBody: the registry (``host[:port]``; Docker Hub is ``docker.io``)
    and the username and password (or token) to pull with."""

    model_config = ConfigDict(extra="forbid")

    registry: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    username: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    password: Annotated[str, StringConstraints(min_length=1, max_length=16384)]


@dataclass(frozen=True, slots=True)
class Credential:
    id: str
    org_id: str
    registry: str
    username: str
    sealed_password: str
    created_by: str
    created_at: int

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Credential:
        return cls(
            id=row["id"],
            org_id=row["org_id"],
            registry=row["registry"],
            username=row["username"],
            sealed_password=row["secret"],
            created_by=row["created_by"],
            created_at=row["created_at"],
        )

    def view(self) -> dict[str, Any]:
        """RegistryCredentialView: never the password."""
        return {
            "id": self.id,
            "org_id": self.org_id,
            "registry": self.registry,
            "username": self.username,
            "created_at": iso_ms(self.created_at),
        }

    def basic(self, sealer: Sealer) -> Basic:
        return Basic(self.username, sealer.open(self.sealed_password, aad=self.id))


def checked_registry(text: str) -> str:
    """The body's registry as credentials key it (400 naming ``registry`` when it is not
    a ``host[:port]``)."""
    try:
        return registry_key(text)
    except BadReference as exc:
        message = f"registry: {exc}"
        raise Problem(
            400, "invalid_field", message, [FieldProblem("registry", "invalid", message)]
        ) from None


def new(
    sealer: Sealer, body: RegistryCredentialBody, *, org_id: str, created_by: str
) -> Credential:
    cred_id = new_id(PREFIX)
    return Credential(
        id=cred_id,
        org_id=org_id,
        registry=checked_registry(body.registry),
        username=body.username,
        sealed_password=sealer.seal(body.password, aad=cred_id),
        created_by=created_by,
        created_at=now_ms(),
    )


async def insert(store: Store, cred: Credential) -> None:
    """Store ``cred``; 409 when its org has one for that registry already."""
    if await for_registry(store, cred.org_id, cred.registry) is not None:
        message = f"the org has a credential for {cred.registry}: delete it first"
        raise Problem(409, "conflict", message, [FieldProblem("registry", "exists", message)])
    await store.execute(
        f"INSERT INTO registry_credentials ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            cred.id,
            cred.org_id,
            cred.registry,
            cred.username,
            cred.sealed_password,
            cred.created_by,
            cred.created_at,
        ),
    )


async def listing(store: Store, org_id: str | None) -> list[Credential]:
    if org_id is None:
        rows = await store.fetchall(
            f"SELECT {_COLUMNS} FROM registry_credentials ORDER BY id DESC", ()
        )
    else:
        rows = await store.fetchall(
            f"SELECT {_COLUMNS} FROM registry_credentials WHERE org_id = ? ORDER BY id DESC",
            (org_id,),
        )
    return [Credential.of(r) for r in rows]


async def for_registry(store: Store, org_id: str, registry: str) -> Credential | None:
    row = await store.fetchone(
        f"SELECT {_COLUMNS} FROM registry_credentials WHERE org_id = ? AND registry = ?",
        (org_id, registry),
    )
    return None if row is None else Credential.of(row)


async def delete(store: Store, cred_id: str, org_id: str | None) -> Credential:
    """Delete a credential; 404 when unknown or another org's (``org_id`` None: any)."""
    row = await store.fetchone(
        f"SELECT {_COLUMNS} FROM registry_credentials WHERE id = ?", (cred_id,)
    )
    if row is None or (org_id is not None and row["org_id"] != org_id):
        raise not_found("registry credential")
    await store.execute("DELETE FROM registry_credentials WHERE id = ?", (cred_id,))
    return Credential.of(row)
