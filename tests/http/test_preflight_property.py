"""Property: preflight gives exactly the decision the real submit makes for the same inputs.

Hypothesis draws the platform caps (settings), an org/project/user policy document, the
live load already in the org and the limits asked; each example runs a fresh app (memory
store) and compares GET or POST /v1/policy/preflight with POST /v1/jobs: allowed <-> 202,
the clamped limits and notes, the refusal's status and reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H

AXES_RANGES = {
    "max_cpu": st.integers(1, 96),
    "max_ram": st.integers(1, 512),
    "max_gpu": st.integers(0, 8),
    "max_timeout_sec": st.integers(1, 7200),
    "max_concurrent_org": st.integers(0, 4),
    "max_concurrent_user": st.integers(0, 4),
}


def sparse_caps() -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries({}, optional=AXES_RANGES)


platform = st.fixed_dictionaries(AXES_RANGES)
limits = st.fixed_dictionaries(
    {},
    optional={
        "cpu_cores": st.integers(0, 200),
        "ram_gb": st.integers(0, 1024),
        "gpu_count": st.integers(0, 16),
        "timeout_sec": st.integers(0, 10_000),
    },
)
doc = st.fixed_dictionaries(
    {},
    optional={
        "org": sparse_caps(),
        "projects": st.fixed_dictionaries({"p": sparse_caps()}),
        "users": st.fixed_dictionaries({"anonymous": sparse_caps()}),
    },
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    platform=platform,
    doc=doc,
    preload=st.integers(0, 5),
    asked=limits,
    project=st.sampled_from(["", "p"]),
    stack=st.sampled_from(["shell", "shell", "shell", "nope"]),
    use_post=st.booleans(),
)
async def test_preflight_equals_submit(
    make_settings: Callable[..., Settings],
    platform: dict[str, int],
    doc: dict[str, Any],
    preload: int,
    asked: dict[str, int],
    project: str,
    stack: str,
    use_post: bool,
) -> None:
    env = {axis: str(value) for axis, value in platform.items()}
    app = create_app(make_settings(database_url="memory", **env))
    async with app.test_app():
        client = app.test_client()
        put = await client.put("/v1/policy", json=doc, headers=ADMIN_H)
        assert put.status_code == 200, await put.get_json()
        for _ in range(preload):  # some live load (each may itself be refused: also a state)
            await client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})

        if use_post:
            pre_response = await client.post(
                "/v1/policy/preflight", json={"stack": stack, "limits": asked, "project": project}
            )
        else:
            query = "&".join(f"{k}={v}" for k, v in asked.items())
            pre_response = await client.get(
                f"/v1/policy/preflight?stack={stack}&project={project}&{query}"
            )
        assert pre_response.status_code == 200
        pre = await pre_response.get_json()

        body = {"stack": stack, "command": ["true"], "limits": asked, "project": project}
        submitted = await client.post("/v1/jobs", json=body)
        answer = await submitted.get_json()

        assert pre["allowed"] == (submitted.status_code == 202), (pre, answer)
        if pre["allowed"]:
            assert pre["http_status"] == 0 and pre["reason"] == ""
            resources = answer["spec"]["resources"]
            got = {k: resources[k] for k in ("cpu_cores", "ram_gb", "gpu_count", "timeout_sec")}
            assert got == pre["clamped"], (pre, answer)
            assert answer["clamp_notes"] == pre["clamp_notes"]
        else:
            assert submitted.status_code == pre["http_status"], (pre, answer)
            assert answer["detail"] == pre["reason"], (pre, answer)
