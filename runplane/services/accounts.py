"""The accounts service: what routes call about people, orgs, credentials and secrets.

Users, orgs and memberships, login tokens and sessions (``runplane/auth/identity.py``),
access tokens (``runplane/auth/tokens.py``), share codes and embed grants
(``runplane/auth/shares.py``), org secrets (``runplane/vault.py``) and the audit trail's
reads (``runplane/auth/audit.py``). Those modules own the tables; routes reach them only
through here (docs/architecture.md, "Tables and their owners").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runplane import vault
from runplane.auth import audit, identity, shares, tokens
from runplane.auth.access import org_role
from runplane.auth.principal import Principal
from runplane.persistence import Store
from runplane.sealing import Sealer
from runplane.settings import Settings


class Accounts:
    def __init__(self, store: Store, settings: Settings, sealer: Callable[[], Sealer]) -> None:
        self.store = store
        self.settings = settings
        self.sealer = sealer

    @property
    def supports_identity(self) -> bool:
        """Whether the store keeps users, orgs and grants (not the memory store)."""
        return self.store.supports_identity

    # access tokens ------------------------------------------------------------------------

    async def mint_token(self, **token: Any) -> tuple[tokens.TokenView, str]:
        """A new access token (``tokens.mint_token``'s keywords): its view and secret."""
        return await tokens.mint_token(self.store, **token)

    async def tokens(self, org_id: str | None) -> list[tokens.TokenView]:
        return await tokens.list_tokens(self.store, org_id)

    async def revoke_token(self, token_id: str) -> bool:
        return await tokens.revoke_token(self.store, token_id)

    # login sessions and people ------------------------------------------------------------

    async def exchange(self, login_token: str) -> identity.SessionGranted:
        return await identity.exchange(self.store, login_token)

    async def logout(self, secret: str) -> None:
        await identity.logout(self.store, secret)

    async def seat(self, *, name: str | None, email: str) -> identity.Seated:
        return await identity.seat(self.store, name=name, email=email)

    async def create_org(self, *, user_id: str, name: str, slug: str | None) -> identity.Org:
        return await identity.create_org(self.store, user_id=user_id, name=name, slug=slug)

    async def memberships(self, user_id: str) -> list[dict[str, Any]]:
        return await identity.memberships(self.store, user_id)

    async def org_role(self, principal: Principal, org_id: str) -> str | None:
        return await org_role(self.store, principal, org_id)

    async def add_member(
        self, org_id: str, *, name: str | None, email: str, role: str, granter: str
    ) -> identity.MemberAdded:
        return await identity.add_member(
            self.store, org_id, name=name, email=email, role=role, granter=granter
        )

    async def members(self, org_id: str) -> list[dict[str, Any]]:
        return await identity.list_members(self.store, org_id)

    async def remove_member(self, org_id: str, user_id: str, *, granter: str) -> str:
        return await identity.remove_member(self.store, org_id, user_id, granter=granter)

    # share codes and embed grants ---------------------------------------------------------

    async def mint_grant(self, **grant: Any) -> tuple[str, shares.Grant]:
        """A share code or embed grant (``shares.mint``'s keywords), signed with the
        server's key: (token, grant)."""
        return await shares.mint(self.store, self.settings.secret_key_bytes(), **grant)

    async def verify_grant(self, token: str, *, kind: str) -> shares.Grant:
        """The grant ``token`` opens; raises ``shares.Refused``."""
        return await shares.verify(self.store, self.settings.secret_key_bytes(), token, kind=kind)

    async def revoke_grants(self, job_id: str, *, kind: str) -> int:
        return await shares.revoke(self.store, job_id, kind=kind)

    # org secrets --------------------------------------------------------------------------

    async def put_secret(
        self, org_id: str, name: str, value: str, by: str
    ) -> tuple[vault.SecretInfo, bool]:
        return await vault.put(self.store, self.sealer(), org_id, name, value, by)

    async def secrets(self, org_id: str | None) -> list[vault.SecretInfo]:
        return await vault.listing(self.store, org_id)

    async def delete_secret(self, org_id: str, name: str) -> bool:
        return await vault.delete(self.store, org_id, name)

    # the audit trail ----------------------------------------------------------------------

    async def audit_rows(self, *, org_id: str | None, limit: int) -> list[dict[str, Any]]:
        return await audit.list_rows(self.store, org_id=org_id, limit=limit)
