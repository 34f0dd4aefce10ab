"""``runplane.agent.protocol``: fields added after the first release are sent only when
set, so an older peer (which refuses unknown fields) still reads the frame."""

from __future__ import annotations

import json

from runplane.agent.protocol import Facts, Hello, JobLogs, MountSpec, decode_agent, encode

FACTS = Facts(name="n", cpu_cores=1, ram_gb=1, arch="x86_64", os="linux")


def test_late_fields_are_sent_only_when_set() -> None:
    plain = Hello(protocol=1, agent_version="v", facts=FACTS)
    assert "auto_update" not in json.loads(encode(plain))
    assert json.loads(encode(plain.model_copy(update={"auto_update": True})))["auto_update"]

    assert "auth" not in MountSpec(type="git", ref="u").model_dump()
    assert MountSpec(type="git", ref="u", auth="Bearer x").model_dump()["auth"] == "Bearer x"

    bare = JobLogs(job_id="j", attempt=1, lines=[("stdout", "x")])
    assert "n" not in json.loads(encode(bare))
    numbered = bare.model_copy(update={"n": 7})
    assert json.loads(encode(numbered))["n"] == 7
    assert decode_agent(encode(numbered)) == numbered
