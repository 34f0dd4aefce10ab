"""A refused token on the command line (issue 37, docs/cli.md): the server answers a token
it did not issue with 401 in every auth mode, so ``runplane --token wrongtoken whoami``
exits 3 and says the token it sent was refused, on an open deploy too (it used to print
``anon anonymous`` and exit 0). Without a token on an open deploy it is the anonymous
caller; with the admin token, the admin."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

from tests.e2e.conftest import ADMIN, e2e_settings, start_server

RUNPLANE = [sys.executable, "-m", "runplane"]


async def cli(url: str, *args: str) -> trio.CompletedProcess[bytes]:
    env = dict(os.environ, RUNPLANE_URL=url, NO_COLOR="1", COLUMNS="200")
    env.pop("RUNPLANE_TOKEN", None)
    env["RUNPLANE_CONFIG"] = os.devnull  # no config file's token
    with trio.fail_after(120):
        return await trio.run_process(
            [*RUNPLANE, *args], env=env, capture_stdout=True, capture_stderr=True, check=False
        )


async def test_a_refused_token_exits_3_with_advice(nursery: trio.Nursery, tmp_path: Path) -> None:
    live = await start_server(nursery, e2e_settings(tmp_path / "server"))  # auth off
    refused = await cli(live.url, "--token", "wrongtoken", "whoami")
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    err = refused.stderr.decode()
    assert "not a token this server issued" in err
    assert "refused the token" in err and "--token" in err
    assert "wrongtoken" not in err
    assert b"anon" not in refused.stdout

    anonymous = await cli(live.url, "whoami")
    assert anonymous.returncode == 0, anonymous.stderr
    assert "anon" in anonymous.stdout.decode()
    admin = await cli(live.url, "--token", ADMIN, "whoami")
    assert admin.returncode == 0, admin.stderr
    assert "admin" in admin.stdout.decode()
    live.stop.set()
    await live.done.wait()
