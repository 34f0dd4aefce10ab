"""Share links and embed grants over the app (auth required): a share code reads its one
job (view, logs, recording, artifacts) and nothing else, writes nothing, and stops at once
when revoked; ``/s/{code}`` redirects; embed grants are limited to their categories, fail
closed, and cannot be minted by a viewer or a shared view (docs/sharing.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import World, build_world, store_of


@pytest.fixture
async def app(make_settings: Callable[..., Settings]) -> AsyncIterator[QuartTrio]:
    application = create_app(make_settings(auth="required"))
    async with application.test_app():
        yield application


async def world_of(app: QuartTrio) -> tuple[Any, World]:
    client = app.test_client()
    return client, await build_world(client, store_of(app))


async def second_job(client: Any, world: World) -> str:
    made = await client.post(
        "/v1/jobs", json={"stack": "shell", "command": ["true"]}, headers=world.headers("member")
    )
    assert made.status_code == 202
    return str((await made.get_json())["job_id"])


async def test_a_share_code_reads_its_job_only_and_is_revocable(app: QuartTrio) -> None:
    client, world = await world_of(app)
    member = world.headers("member")
    made = await client.post(f"/v1/jobs/{world.job_a}/share", headers=member)
    assert made.status_code == 201, await made.get_data()
    result = await made.get_json()
    code = result["code"]
    assert result["token"] == code and code.startswith("rpsh_")
    assert result["url"].endswith(f"/s/{code}")

    for path in ("", "/logs", "/recording", "/artifacts"):
        by_query = await client.get(f"/v1/jobs/{world.job_a}{path}?share={code}")
        assert by_query.status_code == 200, (path, await by_query.get_data())
        by_header = await client.get(
            f"/v1/jobs/{world.job_a}{path}", headers={"X-Share-Token": code}
        )
        assert by_header.status_code == 200, path
    assert (await (await client.get(f"/v1/jobs/{world.job_a}?share={code}")).get_json())[
        "job_id"
    ] == world.job_a

    # another job of the same org: the 404 of an unknown one
    other = await second_job(client, world)
    answers = [await client.get(f"/v1/jobs/{job}?share={code}") for job in (other, "job_nope")]
    assert [a.status_code for a in answers] == [404, 404]
    bodies = [await a.get_json() for a in answers]
    for body in bodies:
        body.pop("request_id", None)
    assert bodies[0] == bodies[1]
    # nothing else, and no writes
    assert (await client.get(f"/v1/jobs?share={code}")).status_code in (400, 401)
    listed = await client.get("/v1/jobs", headers={"X-Share-Token": code})
    assert listed.status_code == 200 and (await listed.get_json()) == []
    cancel = await client.post(f"/v1/jobs/{world.job_a}/cancel", headers={"X-Share-Token": code})
    assert cancel.status_code == 403
    # the short link sends a browser to the run view
    hop = await client.get(f"/s/{code}")
    assert hop.status_code == 302
    assert hop.headers["Location"] == f"/jobs/{world.job_a}?share={code}"
    tampered = code[:-2] + ("A" if code[-2] != "A" else "B") + code[-1]
    for bad in (tampered, "rpsh_nope", "garbage"):
        gone = await client.get(f"/s/{bad}")
        assert gone.status_code == 302 and gone.headers["Location"] == "/?share_error=expired"
        refused = await client.get(f"/v1/jobs/{world.job_a}?share={bad}")
        assert refused.status_code == 401, bad

    # revoked: every code of the job stops at once
    revoked = await client.delete(f"/v1/jobs/{world.job_a}/share", headers=member)
    assert (await revoked.get_json())["revoked"] == 1
    assert (await client.get(f"/v1/jobs/{world.job_a}?share={code}")).status_code == 401
    assert (await client.get(f"/s/{code}")).headers["Location"] == "/?share_error=expired"


async def test_sharing_needs_runs_share_and_the_job_of_ones_own_org(app: QuartTrio) -> None:
    client, world = await world_of(app)
    viewer = await client.post(f"/v1/jobs/{world.job_a}/share", headers=world.headers("viewer"))
    assert viewer.status_code == 403
    stranger = await client.post(
        f"/v1/jobs/{world.job_a}/share", headers=world.headers("wrong_org")
    )
    unknown = await client.post("/v1/jobs/job_nope/share", headers=world.headers("wrong_org"))
    assert stranger.status_code == unknown.status_code == 404


async def test_embed_grants_are_limited_to_their_categories_and_fail_closed(
    app: QuartTrio,
) -> None:
    client, world = await world_of(app)
    body = {
        "ttl_hours": 10_000,  # capped at 720
        "allow": ["logs"],
        "branding": {"title": "Lab run", "logo_url": "https://example.org/l.png", "accent": "#0af"},
    }
    made = await client.post(
        f"/v1/jobs/{world.job_a}/embed", json=body, headers=world.headers("member")
    )
    assert made.status_code == 201, await made.get_data()
    minted = await made.get_json()
    token = minted["token"]
    assert token.startswith("rpem_") and minted["url"].endswith(f"/embed/e/{token}")
    assert minted["url"].startswith("http")  # absolute, as a share's url
    grant = await client.get("/v1/embed/grant", headers={"X-Embed-Token": token})
    view = await grant.get_json()
    assert view["job"] == world.job_a and view["allow"] == ["logs"]
    assert view["branding"]["title"] == "Lab run"
    created = await client.get(f"/v1/jobs/{world.job_a}", headers={"X-Embed-Token": token})
    assert created.status_code == 200
    assert view["exp"] - 720 * 3600 <= (await created.get_json()).get("exp", view["exp"])
    # its categories only
    assert (await client.get(f"/v1/jobs/{world.job_a}/logs?embed={token}")).status_code == 200
    assert (await client.get(f"/v1/jobs/{world.job_a}/recording?embed={token}")).status_code == 401
    assert (await client.get(f"/v1/jobs/{world.job_a}/artifacts?embed={token}")).status_code == 401
    hop = await client.get(f"/embed/e/{token}")
    assert hop.headers["Location"] == f"/embed?e={token}&j={world.job_a}"
    # fail closed: missing, tampered, a share code, garbage
    assert (await client.get("/v1/embed/grant")).status_code == 401
    for bad in (token[:-3] + "xyz", "rpem_x.y", "nope"):
        assert (
            await client.get("/v1/embed/grant", headers={"X-Embed-Token": bad})
        ).status_code == 401
        assert (await client.get(f"/embed/e/{bad}")).headers[
            "Location"
        ] == "/embed?embed_error=expired"
    share = await (
        await client.post(f"/v1/jobs/{world.job_a}/share", headers=world.headers("member"))
    ).get_json()
    assert (await client.get(f"/v1/embed/grant?embed={share['code']}")).status_code == 401
    # revoked grants fail too (the store is asked every time)
    await store_of(app).execute("UPDATE job_shares SET revoked_at = 1 WHERE kind = 'embed'")
    assert (
        await client.get("/v1/embed/grant", headers={"X-Embed-Token": token})
    ).status_code == 401


async def test_who_may_mint_an_embed_grant(app: QuartTrio) -> None:
    client, world = await world_of(app)
    path = f"/v1/jobs/{world.job_a}/embed"
    assert (await client.post(path, headers=world.headers("viewer"))).status_code == 403
    assert (await client.post(path, headers=world.headers("wrong_org"))).status_code == 404
    assert (await client.post(path)).status_code == 401
    assert (await client.post(path, headers=world.headers("admin"))).status_code == 201
    share = await (
        await client.post(f"/v1/jobs/{world.job_a}/share", headers=world.headers("member"))
    ).get_json()
    as_shared = await client.post(path, headers={"X-Share-Token": share["code"]})
    assert as_shared.status_code == 403
    # a run submitted with ?embed=1 carries a grant of every category
    run = await client.post(
        "/v1/runs?embed=1",
        json={"stack": "shell", "command": ["true"]},
        headers=world.headers("member"),
    )
    assert run.status_code == 202
    job = await run.get_json()
    grant = await (await client.get(f"/v1/embed/grant?embed={job['embed']['token']}")).get_json()
    assert grant["job"] == job["job_id"] and grant["allow"] == []
