"""Operator routes under ``/v1/admin`` that need the admin token."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints
from quart import Blueprint

from runplane.actors import channels
from runplane.auth.rules import ADMIN
from runplane.http.bodies import Body, parse_body
from runplane.http.context import services
from runplane.http.guards import require_admin
from runplane.http.openapi import doc
from runplane.http.openapi import views as v

blueprint = Blueprint("admin", __name__, url_prefix="/v1/admin")

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]


class ChannelTargetBody(Body):
    channel: Name
    version: Name


@blueprint.get("/channel-target")
@doc("Agent version targets per channel", v.ChannelTargets, rule=ADMIN)
async def get_channel_targets() -> dict[str, str]:
    require_admin()
    return await channels.get_targets(services().root.channels)


@blueprint.post("/channel-target")
@doc("Set a channel's target agent version", v.ChannelTargets, body=ChannelTargetBody, rule=ADMIN)
async def set_channel_target() -> dict[str, str]:
    require_admin()
    body = await parse_body(ChannelTargetBody)
    root = services().root
    targets = await channels.set_target(root.channels, body.channel, body.version)
    # agents started with --auto-update take the new target now (docs/agent.md)
    await root.fleet.announce_target(body.channel, body.version)
    return targets
