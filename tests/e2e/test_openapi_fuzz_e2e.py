"""schemathesis against a live server, from the server's own OpenAPI document
(docs/api.md "OpenAPI"), in the open and the required auth mode, with every check it has:
every answer documented (status, content type, headers, body schema) and none a 5xx, every
request the document allows taken and every one it refuses refused, auth enforced exactly
where the document (which follows the deploy's auth mode) says, ``Allow`` as documented
(tests/fuzz/schemathesis.toml: bounded examples, a fixed seed, loopback, stops by itself;
each exception named there with its reason). A failure prints schemathesis' report, with
a ``curl`` to reproduce each case."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.e2e.conftest import ADMIN, e2e_settings, start_server

CONFIG = Path(__file__).resolve().parents[1] / "fuzz" / "schemathesis.toml"
ST = shutil.which("st", path=str(Path(sys.executable).parent))

pytestmark = pytest.mark.skipif(ST is None, reason="schemathesis is not installed")


@pytest.mark.parametrize("auth", ["off", "required"])
async def test_the_api_answers_as_its_document_says(
    nursery: trio.Nursery, tmp_path: Path, auth: str
) -> None:
    # rate limits off: the document does not promise a 429 on every route
    limits = {"rate_limit": "off", "rate_limit_address": "off"}
    live = await start_server(nursery, e2e_settings(tmp_path / "server", auth=auth, **limits))
    assert ST is not None
    command = [ST, "--config-file", str(CONFIG), "--no-color", "run"]
    if auth == "required":  # the admin token opens the most routes
        command += ["-H", f"Authorization: Bearer {ADMIN}"]
    command.append(live.url.rstrip("/") + "/openapi.json")
    with trio.fail_after(600):
        # in the test's own directory: schemathesis keeps a cache (.schemathesis/) in its
        # working directory, which must not land in the repository
        done = await trio.run_process(
            command, capture_stdout=True, stderr=subprocess.STDOUT, check=False, cwd=tmp_path
        )
    live.stop.set()
    report = done.stdout.decode(errors="replace")
    generated = re.search(r"(\d+) generated", report)
    print(f"schemathesis ({auth}): {generated.group(0) if generated else '?'}")
    assert done.returncode == 0, report[-20000:]
    assert generated is not None and int(generated.group(1)) > 1000, report[-3000:]
    tested = re.search(r"Tested: (\d+)", report)
    assert tested is not None and int(tested.group(1)) >= 100, report[-3000:]
