"""The CLI's everyday verbs as subprocesses (``python -m runplane``) against a live server
with a real agent (docs/cli.md): secrets (the value never printed), schedules, webhooks
(the signing secret once, a delivery listed), share and embed links (absolute URLs that
open), a job's artifacts listed, downloaded one by one and as a zip with the right bytes,
and ``stacks``/``stacks show`` listing config fields."""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from pathlib import Path

import httpx
import trio

from tests.e2e.conftest import (
    ADMIN,
    StartAgent,
    e2e_settings,
    online_nodes,
    start_server,
    wait_for,
)
from tests.e2e.test_cli_e2e import RUNPLANE, env_for
from tests.webhook_receiver import Receiver

VALUE = "the-secret-value-0123456789-never-shown"
BIG = 9 << 20  # over the progress threshold: the download is streamed in chunks


async def run(
    url: str, *args: str, stdin: bytes | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    """``runplane ARGS`` as a process: (exit status, stdout, stderr)."""
    with trio.fail_after(120):
        done = await trio.run_process(
            [*RUNPLANE, *args],
            env=env_for(url),
            stdin=stdin if stdin is not None else b"",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=str(cwd) if cwd is not None else None,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def ok(url: str, *args: str, cwd: Path | None = None) -> str:
    code, out, err = await run(url, *args, cwd=cwd)
    assert code == 0, (args, out, err)
    return out


async def test_secret_schedule_webhook_round_trips(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path
) -> None:
    server = await start_server(
        nursery, e2e_settings(data_dir, egress_allow="127.0.0.1"), heartbeat_sec=0.5
    )
    url, admin = server.url, ("--token", ADMIN, "--org", "org_default")
    # a secret from stdin: set, listed by name, never its value
    code, out, err = await run(
        url, "secret", "set", "API_KEY", *admin, stdin=VALUE.encode() + b"\n"
    )
    assert code == 0, err
    assert "API_KEY created" in out and VALUE not in out + err
    code, out, err = await run(url, "secret", "set", "API_KEY", "--value", "v2", *admin)
    assert code == 0 and "API_KEY replaced" in out and "v2" not in out + err, err
    listed = await ok(url, "secret", "ls", *admin)
    assert "API_KEY" in listed and VALUE not in listed and "v2" not in listed
    as_json = json.loads(await ok(url, "secret", "ls", *admin, "-o", "json"))
    assert [s["name"] for s in as_json] == ["API_KEY"] and "value" not in as_json[0]
    code, _, err = await run(url, "secret", "ls")  # no token: refused, with the next step
    assert code == 3 and "error:" in err and "next:" in err
    await ok(url, "secret", "rm", "API_KEY", *admin)
    assert "API_KEY" not in await ok(url, "secret", "ls", *admin)

    # a schedule from a file: created, listed, paused, shown, deleted
    spec = tmp_path / "nightly.yaml"
    spec.write_text('name: nightly\ncron: "0 3 * * *"\njob: {stack: shell, command: [echo, hi]}\n')
    schedule_id = (await ok(url, "schedule", "create", "-f", str(spec))).strip()
    assert schedule_id.startswith("sch_")
    table = await ok(url, "schedule", "ls")
    assert schedule_id in table and "nightly" in table and "cron 0 3 * * * UTC" in table
    assert schedule_id in await ok(url, "schedule", "pause", schedule_id)
    shown = json.loads(await ok(url, "schedule", "get", schedule_id, "-o", "json"))
    assert shown["suspend"] is True and shown["next_run_at"] is None
    assert "paused" in await ok(url, "schedule", "get", schedule_id)
    await ok(url, "schedule", "resume", schedule_id)
    await ok(url, "schedule", "rm", schedule_id)
    assert schedule_id not in await ok(url, "schedule", "ls")
    code, _, err = await run(url, "schedule", "get", schedule_id)
    assert code == 3 and "runplane schedule ls" in err

    # a webhook: its secret printed once, a test delivery listed, deleted
    receiver = await Receiver.start(nursery)
    code, out, err = await run(
        url, "webhook", "create", receiver.url(), "--event", "run.failed", *admin
    )
    assert code == 0, err
    fields = dict(line.split(None, 1) for line in out.splitlines())
    webhook_id, secret = fields["webhook"], fields["secret"]
    assert webhook_id.startswith("wh_") and secret.startswith("whsec_")
    listed = await ok(url, "webhook", "ls", *admin)
    assert webhook_id in listed and "run.failed" in listed and secret not in listed
    await ok(url, "webhook", "test", webhook_id, "--token", ADMIN)
    (got,) = await receiver.wait_for(1)
    assert got.verified(secret, time.time())

    async def delivered() -> str | None:
        out = await ok(url, "webhook", "deliveries", webhook_id, "--token", ADMIN)
        return out if "delivered" in out else None

    table = await wait_for(delivered, 30, "the ping delivery listed as delivered")
    assert "ping" in table
    await ok(url, "webhook", "rm", webhook_id, "--token", ADMIN)
    assert webhook_id not in await ok(url, "webhook", "ls", *admin)
    server.stop.set()
    await server.done.wait()


SCRIPT = (
    "mkdir -p out data/sub; printf alpha > out/a.txt; printf beta > data/b.txt; "
    f"head -c {BIG} /dev/urandom > data/sub/big.bin"
)


async def test_share_embed_and_artifacts_of_a_job_with_two_outputs(
    nursery: trio.Nursery, data_dir: Path, tmp_path: Path, start_agent: StartAgent
) -> None:
    server = await start_server(nursery, e2e_settings(data_dir), heartbeat_sec=0.5)
    url = server.url
    start_agent(url, "verbs")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
    code, out, err = await run(
        url,
        "submit",
        "-f",
        "-o",
        "json",
        "--output",
        "a=out/a.txt",
        "--output",
        "b=data",
        "shell",
        "--",
        "sh",
        "-c",
        SCRIPT,
    )
    assert code == 0, err
    job_id = json.loads(out)["job_id"]

    # artifacts: ls, get (by path, by a one-file artifact, into a directory), zip
    table = await ok(url, "artifacts", "ls", job_id)
    for path in ("out/a.txt", "data/b.txt", "data/sub/big.bin"):
        assert path in table
    listed = json.loads(await ok(url, "artifacts", "ls", job_id, "-o", "json"))
    digests = {e["ref"].rsplit(f"{job_id}/", 1)[1]: e["sha256"] for e in listed}
    where = tmp_path / "dl"
    where.mkdir()
    await ok(url, "artifacts", "get", job_id, "a", "-O", str(where))
    assert (where / "a.txt").read_bytes() == b"alpha"
    await ok(url, "artifacts", "get", job_id, "data/b.txt", cwd=where)
    assert (where / "b.txt").read_bytes() == b"beta"
    got = json.loads(
        await ok(
            url,
            "artifacts",
            "get",
            job_id,
            "data/sub/big.bin",
            "-O",
            str(where / "big"),
            "-o",
            "json",
        )
    )
    big = (where / "big").read_bytes()
    assert len(big) == BIG == got["size"]
    assert hashlib.sha256(big).hexdigest() == digests["data/sub/big.bin"] == got["sha256"]
    code, _, err = await run(url, "artifacts", "get", job_id, "b")  # two files: name one
    assert code == 3 and "data/b.txt" in err and f"runplane artifacts zip {job_id}" in err
    code, _, err = await run(url, "artifacts", "get", job_id, "data/b.tx")
    assert code == 3 and "did you mean 'data/b.txt'?" in err and "artifacts ls" in err
    await ok(url, "artifacts", "zip", job_id, "-O", str(where / "all.zip"))
    with zipfile.ZipFile(io.BytesIO((where / "all.zip").read_bytes())) as archive:
        assert sorted(archive.namelist()) == ["data/b.txt", "data/sub/big.bin", "out/a.txt"]
        assert archive.read("out/a.txt") == b"alpha" and archive.read("data/sub/big.bin") == big

    # share: an absolute URL that opens the run view; unshare revokes it
    link = (await ok(url, "share", job_id, "--ttl-hours", "2")).strip()
    assert link.startswith(url + "/s/rpsh_"), link
    async with httpx.AsyncClient() as browser:
        hop = await browser.get(link)
        assert hop.status_code == 302 and hop.headers["location"].startswith(
            f"/jobs/{job_id}?share="
        )
        opened = await browser.get(link, follow_redirects=True)
        assert opened.status_code == 200
        code_ = link.rsplit("/", 1)[1]
        view = await browser.get(f"{url}/v1/jobs/{job_id}", headers={"X-Share-Token": code_})
        assert view.status_code == 200 and view.json()["job_id"] == job_id
        assert "1 share link(s) revoked" in await ok(url, "unshare", job_id)
        assert (await browser.get(link)).headers["location"].startswith("/?share_error")
        embed = (await ok(url, "embed", job_id, "--allow", "logs")).strip()
        assert embed.startswith(url + "/embed/e/rpem_"), embed  # absolute, as a share's
        assert (await browser.get(embed)).headers["location"].startswith("/embed?e=rpem_")

    # the catalog: descriptions whole, config keys; one stack's fields
    stacks = await ok(url, "stacks")
    python = next(line for line in stacks.splitlines() if line.startswith("python "))
    assert "entrypoint,install_requirements,unbuffered" in python
    assert "(or reports the interpreter)." in python  # the whole description
    shown = await ok(url, "stacks", "show", "python")
    for key in ("entrypoint", "install_requirements", "unbuffered"):
        assert any(line.startswith(key + " ") for line in shown.splitlines()), shown
    assert "lower is better" in shown and "example hello" in shown
    entry = json.loads(await ok(url, "stacks", "show", "sim-cartpole", "-o", "json"))
    assert {f["key"] for f in entry["config"]} >= {"episodes", "realtime"}
    code, _, err = await run(url, "stacks", "show", "pythn")
    assert code == 3 and "did you mean 'python'?" in err and "runplane stacks" in err
    server.stop.set()
    await server.done.wait()
