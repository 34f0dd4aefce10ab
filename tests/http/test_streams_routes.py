"""The stream routes' answers that need no agent: the 503 switches, unknown streams,
a video stream refused at subscribe, bad bodies, the ticket rules (pure), and the
stream list of a job (the job actor's side is tests/actors/test_job_streams.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runplane.http.app import create_app
from runplane.settings import Settings
from runplane.streams import tickets

VIDEO_STACK = """
name = "cam"
version = "1.0.0"
image = "python:3.11-slim"
default_command = ["true"]

[[streams]]
name = "front"
kind = "video"
fps = 30
width = 640
height = 480

[[streams]]
name = "state"
kind = "telemetry"
fps = 50

[[streams]]
name = "off"
kind = "data"
enabled = false
"""


@pytest.fixture
def stacks_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "stacks"
    folder.mkdir()
    (folder / "cam.toml").write_text(VIDEO_STACK)
    return folder


async def _job(client: Any, stack: str = "shell") -> str:
    response = await client.post("/v1/jobs", json={"stack": stack, "command": ["true"]})
    assert response.status_code == 202, await response.get_data()
    return str((await response.get_json())["job_id"])


async def test_declared_streams_are_listed_and_video_is_refused(
    make_settings: Callable[..., Settings], stacks_dir: Path
) -> None:
    app = create_app(make_settings(stacks_dir=str(stacks_dir)))
    async with app.test_app():
        client = app.test_client()
        job_id = await _job(client, "cam")
        views = await (await client.get(f"/v1/jobs/{job_id}/streams")).get_json()
        assert [(v["name"], v["kind"], v["transport"], v["subscribable"]) for v in views] == [
            ("front", "video", "webrtc", False),
            ("state", "telemetry", "sse", True),
            ("off", "data", "sse", False),
        ]
        assert "not relayed yet" in views[0]["note"]
        assert (views[1]["fps"], views[0]["width"], views[0]["height"]) == (50, 640, 480)
        video = await client.post(f"/v1/jobs/{job_id}/streams/front/subscribe")
        assert video.status_code == 422
        assert (await video.get_json())["errors"][0]["key"] == "name"
        off = await client.post(f"/v1/jobs/{job_id}/streams/off/subscribe")
        assert off.status_code == 422
        unknown = await client.post(f"/v1/jobs/{job_id}/streams/nope/subscribe")
        assert unknown.status_code == 404
        bad = await client.post(
            f"/v1/jobs/{job_id}/streams/state/subscribe", json={"session_id": "x"}
        )
        assert bad.status_code == 400
        ok = await client.post(
            f"/v1/jobs/{job_id}/streams/state/subscribe", json={"session_id": "sub_abc"}
        )
        body = await ok.get_json()
        assert ok.status_code == 200 and body["session_id"] == "sub_abc"
        assert body["teleop"] is True  # the open deploy's anonymous caller may act
        # the job is queued, not running: a teleop frame is 409
        teleop = await client.post(
            f"/v1/jobs/{job_id}/streams/state/teleop?ticket={body['ticket']}", json={"a": 1}
        )
        assert teleop.status_code == 409
        too_big = await client.post(
            f"/v1/jobs/{job_id}/streams/state/teleop?ticket={body['ticket']}",
            data=b'{"a": "' + b"x" * (256 * 1024) + b'"}',
            headers={"Content-Type": "application/json"},
        )
        assert too_big.status_code == 413
        not_json = await client.post(
            f"/v1/jobs/{job_id}/streams/state/teleop?ticket={body['ticket']}",
            data=b"{nope",
            headers={"Content-Type": "application/json"},
        )
        assert not_json.status_code == 400


@pytest.mark.parametrize("area", ["streams", "teleop"])
async def test_switches_answer_503(make_settings: Callable[..., Settings], area: str) -> None:
    app = create_app(make_settings(disable=area))
    async with app.test_app():
        client = app.test_client()
        job_id = await _job(client)
        await _stream_of(app, job_id)
        views = await (await client.get(f"/v1/jobs/{job_id}/streams")).get_json()
        assert views[0]["subscribable"] is (area != "streams")
        subscribe = await client.post(f"/v1/jobs/{job_id}/streams/telemetry/subscribe")
        teleop = await client.post(
            f"/v1/jobs/{job_id}/streams/telemetry/teleop?ticket=rpst_x.y", json={}
        )
        assert teleop.status_code == 503
        if area == "streams":  # (with streams on, the data would follow the queued job)
            data = await client.get(f"/v1/jobs/{job_id}/streams/telemetry/data")
            assert subscribe.status_code == 503 and data.status_code == 503
            assert "RUNPLANE_DISABLE" in (await data.get_json())["detail"]
        else:
            assert subscribe.status_code == 200


async def _stream_of(app: Any, job_id: str) -> None:
    """Give the job a stream, as if it had written one."""
    streams = '{"telemetry": {"kind": "data", "count": 1, "last_seq": 1}}'
    await app.extensions["runplane"].store.execute(
        "UPDATE jobs SET streams = ? WHERE id = ?", (streams, job_id)
    )


def test_tickets_are_bound_signed_and_expire() -> None:
    key = b"k" * 32
    claims = tickets.Ticket("job_a", "s", "sub_1", "org_a", True, 1_000)
    token = tickets.mint(key, claims)
    assert tickets.verify(key, token, job_id="job_a", stream="s", now=999) == claims
    for token_, job, stream, now, why in (
        (token, "job_a", "s", 1_000, "expired"),
        (token, "job_b", "s", 0, "another job or stream"),
        (token, "job_a", "t", 0, "another job or stream"),
        (token[:-1] + ("A" if token[-1] != "A" else "B"), "job_a", "s", 0, "signature"),
        ("rpst_abc", "job_a", "s", 0, "not a stream ticket"),
        ("rpt_x", "job_a", "s", 0, "not a stream ticket"),
    ):
        with pytest.raises(tickets.TicketInvalid, match=why):
            tickets.verify(key, token_, job_id=job, stream=stream, now=now)
    other_key = tickets.mint(b"z" * 32, claims)
    with pytest.raises(tickets.TicketInvalid, match="signature"):
        tickets.verify(key, other_key, job_id="job_a", stream="s", now=0)
