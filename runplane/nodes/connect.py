"""Who an agent's hello identifies: a node credential, a join token (enrolls, and returns
the new credential), or nobody in an open deploy. Refusals carry the WebSocket close code
and a sentence saying what to do."""

from __future__ import annotations

from runplane.agent import protocol as p
from runplane.persistence import Store
from runplane.settings import Settings

from . import enrollment


class ConnectRefused(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


async def identify(
    settings: Settings, store: Store, hello: p.Hello
) -> tuple[enrollment.NodeIdentity, str | None]:
    """The node ``hello`` speaks for, and its new credential when it just enrolled.
    Raises :class:`ConnectRefused`."""
    if hello.protocol != p.PROTOCOL_VERSION:
        raise ConnectRefused(
            p.CLOSE_UPGRADE_REQUIRED,
            f"agent protocol {hello.protocol} is not supported (server speaks "
            f"{p.PROTOCOL_VERSION}); upgrade the agent to runplane {_server_version()}",
        )
    if hello.credential:
        identity = await enrollment.verify_node_credential(store, hello.credential)
        if identity is None:
            raise ConnectRefused(
                p.CLOSE_UNAUTHORIZED,
                "node credential unknown or revoked: delete the agent's credential file "
                "and enroll again with a join token",
            )
        return identity, None
    if not settings.area_enabled("enrollment"):
        raise ConnectRefused(p.CLOSE_DISABLED, "enrollment is disabled on this server")
    try:
        if hello.join_token:
            node = await enrollment.enroll_node(store, hello.join_token)
        elif enrollment.open_enrollment_allowed(settings):
            node = await enrollment.open_enroll(store)
        else:
            raise ConnectRefused(
                p.CLOSE_UNAUTHORIZED,
                "this server needs a join token: mint one with POST /v1/nodes/join-tokens "
                "and pass --join-token",
            )
    except enrollment.EnrollmentRefused as exc:
        raise ConnectRefused(p.CLOSE_UNAUTHORIZED, str(exc)) from None
    identity = enrollment.NodeIdentity(node_id=node.node_id, tier=node.tier, org_id=node.org_id)
    return identity, node.credential_secret


def _server_version() -> str:
    from runplane import __version__

    return __version__
