"""``runplane serve`` with ``POST /v1/jobs`` answered by a bare ASGI handler in front of
Quart: the experiment behind ``bench.lean_submit``, NOT a shipped path.

    python -m bench.lean_serve serve --host 127.0.0.1 --port 0

The handler parses the SubmitJobBody with pydantic, calls the same jobs service
(``Jobs.submit``: plan, admission, durable insert, placement) and answers the same Job
view with 202. It skips what a shipped lean path would still have to do: authentication
(it needs ``RUNPLANE_AUTH=off``), the request log, the audit row, the input checks and
problem rendering (a bad body here is a 500). It measures the upper bound of the
lever "serve the hottest route through a leaner ASGI path under the same app".
"""

from __future__ import annotations

import json
import sys
from typing import Any

import runplane.http.app as app_module
from runplane.jobs.spec import SubmitJobBody
from runplane.jobs.view import job_view
from runplane.services.jobs import Submitter

_create_app = app_module.create_app


def create_app(settings: Any, **kwargs: Any) -> Any:
    app = _create_app(settings, **kwargs)
    inner = app.asgi_app

    async def lean(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/v1/jobs":
            await inner(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        jobs = app.extensions["runplane"].root.jobs
        body = SubmitJobBody.model_validate_json(b"".join(chunks))
        created = await jobs.submit(body, Submitter("org_default", "anonymous"))
        reasons = await jobs.wait_reasons([created.row])
        view = job_view(created.row, wait_reason=reasons.get(created.row.id))
        data = json.dumps({**view, "clamp_notes": list(created.notes)}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": 202, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    app.asgi_app = lean
    return app


if __name__ == "__main__":
    if "--auth-on" in sys.argv:
        raise SystemExit("the experiment serves only RUNPLANE_AUTH=off")
    app_module.create_app = create_app  # read by ``runplane serve`` when it builds the app
    from runplane.cli import main

    sys.argv = ["runplane", *sys.argv[1:]]
    main()
