"""The Python client of the runplane API: typed, synchronous (httpx), for scripts and
notebooks (docs/cli.md "Python client").

>>> from runplane.client import Client
>>> with Client() as rp:                      # RUNPLANE_URL / RUNPLANE_TOKEN / config file
...     job = rp.submit({"stack": "shell", "command": ["echo", "hi"]})
...     for event in rp.events(job["job_id"]):  # follows until the job ends
...         print(event)

Every error the server answers is an :class:`ApiError` carrying the RFC 9457 problem
(its ``detail`` says what went wrong) and :meth:`ApiError.hint` (what to do next).
:meth:`Client.events` resumes a dropped event stream with ``Last-Event-ID``, so nothing is
lost or repeated across a server restart.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx
from httpx_sse import EventSource

from .config import ClientConfig

TERMINAL = frozenset({"succeeded", "failed", "timeout", "cancelled"})
#: methods sent again after a 502/503 or a cut connection (as are requests with an
#: Idempotency-Key), and for how long in all
_REPEATABLE = frozenset({"GET", "HEAD", "PUT", "DELETE"})
RETRY_FOR_SEC = 15.0


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(2.0, max(0.1, float(response.headers.get("Retry-After", "1"))))
    except ValueError:
        return 1.0


JSONObject = dict[str, Any]


class ApiError(Exception):
    """The server answered with a problem (or could not be reached: ``status`` 0).
    ``path`` and ``sent`` are the request's path and JSON body, when known: the next step
    :meth:`hint` gives depends on what was asked."""

    def __init__(
        self,
        status: int,
        detail: str,
        problem: JSONObject | None = None,
        *,
        path: str = "",
        sent: Any = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.problem = problem or {}
        self.path = path
        self.sent = sent

    @property
    def code(self) -> str:
        return str(self.problem.get("code", ""))

    def hint(self, url: str = "") -> str:
        """What to do next, by status and route; never the detail again ("" when there is
        nothing to add)."""
        if self.status == 0:
            return (
                f"is the server running at {url}? start one with `runplane serve`, "
                "or set RUNPLANE_URL"
            )
        if self.status == 401:
            return (
                'send a token: set RUNPLANE_TOKEN, pass --token, or put token = "..." in '
                "the config file"
            )
        if self.status == 403:
            return "your token lacks the scope this needs: ask an org admin for a role that has it"
        if self.status == 404:
            return _LISTED_BY.get(_area(self.path), _LISTED_BY["jobs"])
        if self.status == 429 and self.code == "rate_limited":
            return "too many requests with this credential or from this address: slow down"
        if self.status == 429:
            return "your org or user is at its concurrency limit: wait for a run to finish"
        if self.status in (400, 422):
            return self._field_hint()
        if self.status >= 500:
            return "the server could not do it now: try again in a moment"
        return ""

    def _field_hint(self) -> str:
        """The field problems the detail does not already say (it states the first one),
        then where to look: a config's fields (``stacks show``), the catalog, ``--org``."""
        told = _plain(self.detail)
        extra: list[str] = []
        steps: dict[str, str] = {}
        for n, problem in enumerate(self.problem.get("errors") or []):
            key, message = str(problem.get("key") or ""), str(problem.get("message") or "")
            leaf = key.removeprefix("job.")
            if leaf.startswith("config."):
                stack = _sent_stack(self.sent) or "STACK"
                steps["config"] = (
                    f"`runplane stacks show {stack}` lists the stack's config fields, their "
                    "types and ranges"
                )
            elif leaf == "stack":
                steps["stack"] = "`runplane stacks` lists the catalog"
            elif key in ("org", "org_id") and problem.get("code") == "missing":
                steps["org"] = "name the org with --org ORG_ID (the admin token acts for any)"
            said = n == 0 or _plain(message) in told or told in _plain(message)
            if message and not said:
                extra.append(f"{key}: {message}" if key else message)
        return "; ".join([*extra, *steps.values()])


#: The command that lists what a 404 of each area could not find.
_LISTED_BY = {
    "jobs": "check the id (`runplane ls` lists your jobs)",
    "stacks": "`runplane stacks` lists the catalog",
    "secrets": "`runplane secret ls` lists the org's secrets",
    "schedules": "check the id (`runplane schedule ls` lists your schedules)",
    "webhooks": "check the id (`runplane webhook ls` lists the org's webhooks)",
    "artifacts": "`runplane artifacts ls JOB` lists a job's artifacts",
    "artifacts-zip": "check the job id (`runplane ls` lists your jobs)",
    "pipelines": "check the id of the pipeline run",
    "sessions": "check the id (`runplane session ls` lists your sessions)",
}


def _area(path: str) -> str:
    """``jobs`` for ``/v1/jobs/...`` (the first segment after the version)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    return parts[1] if len(parts) > 1 and parts[0] == "v1" else ""


def _plain(text: str) -> str:
    return " ".join(text.lower().split())


def _sent_stack(sent: Any) -> str | None:
    """The stack a refused body named (a job's, or a schedule's job's)."""
    if not isinstance(sent, dict):
        return None
    stack = sent.get("stack")
    if isinstance(stack, str):
        return stack
    return _sent_stack(sent.get("job"))


class Client:
    """One server, one token; a connection pool reused across calls."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0
    ) -> None:
        self.config = ClientConfig.load(url, token)
        headers = {"User-Agent": "runplane-client"}
        if self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        self._http = httpx.Client(base_url=self.config.url, headers=headers, timeout=timeout)

    @property
    def url(self) -> str:
        return self.config.url

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON answer of ``method path``; :class:`ApiError` for a problem.

        A request that is safe to repeat (GET, HEAD, PUT, DELETE, or one carrying an
        Idempotency-Key) is sent again when the server answers 502 or 503 with Retry-After
        (overloaded, or an HA takeover under way: ``no_leader``, ``leader_lost``;
        docs/operations.md), after that delay (at most 2 s), or when the connection is cut
        half way; any request after a 429 with Retry-After (``rate_limited``: nothing was
        done); for up to ``RETRY_FOR_SEC`` seconds in all."""
        headers = kwargs.get("headers") or {}
        repeatable = method.upper() in _REPEATABLE or "Idempotency-Key" in headers
        deadline = time.monotonic() + RETRY_FOR_SEC
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                if repeatable and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise ApiError(0, f"cannot reach {self.url}: {exc}") from None
            except httpx.TransportError as exc:
                raise ApiError(0, f"cannot reach {self.url}: {exc}") from None
            # a passing condition says when to come back; a switched-off area does not
            passing = response.status_code in (502, 503) and "Retry-After" in response.headers
            # over a rate limit (429 with Retry-After; a quota's 429 has none): nothing was
            # done, so any request may be sent again
            limited = response.status_code == 429 and "Retry-After" in response.headers
            if (limited or (repeatable and passing)) and time.monotonic() < deadline:
                time.sleep(_retry_after(response))
                continue
            try:
                return _answer(response)
            except ApiError as exc:
                exc.path, exc.sent = path, kwargs.get("json")
                raise

    # -- jobs ------------------------------------------------------------------------------

    def submit(self, body: JSONObject, *, idempotency_key: str | None = None) -> JSONObject:
        """Submit a run (a SubmitJobBody, or a RunSpecBody with layers): the Job view.
        Without an ``idempotency_key`` one is made for this call, so a retry after a cut
        connection or a takeover never makes two jobs."""
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        answer: JSONObject = self.request("POST", "/v1/runs", json=body, headers=headers)
        return answer

    def submit_batch(self, body: JSONObject, *, idempotency_key: str | None = None) -> JSONObject:
        """Submit a job array (``{"jobs": [...]}`` or ``{"job": ..., "sweep": ...}``):
        ``{array_id, count, jobs, rejected}`` (an Idempotency-Key is made when none is
        given, as for ``submit``)."""
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        answer: JSONObject = self.request("POST", "/v1/jobs/batch", json=body, headers=headers)
        return answer

    def array(self, array_id: str) -> JSONObject:
        answer: JSONObject = self.request("GET", f"/v1/arrays/{array_id}")
        return answer

    def cancel_array(self, array_id: str) -> JSONObject:
        answer: JSONObject = self.request("POST", f"/v1/arrays/{array_id}/cancel")
        return answer

    def validate(self, body: JSONObject) -> JSONObject:
        answer: JSONObject = self.request("POST", "/v1/runs/validate", json=body)
        return answer

    def job(self, job_id: str) -> JSONObject:
        answer: JSONObject = self.request("GET", f"/v1/jobs/{job_id}")
        return answer

    def jobs(
        self,
        *,
        phase: str | None = None,
        stack: str | None = None,
        array: str | None = None,
        limit: int = 50,
    ) -> list[JSONObject]:
        params: dict[str, Any] = {"limit": limit}
        if array:
            params["array"] = array
        if phase:
            params["phase"] = phase
        if stack:
            params["stack"] = stack
        answer: list[JSONObject] = self.request("GET", "/v1/jobs", params=params)
        return answer

    def cancel(self, job_id: str) -> JSONObject:
        answer: JSONObject = self.request("POST", f"/v1/jobs/{job_id}/cancel")
        return answer

    def rerun(self, job_id: str) -> JSONObject:
        answer: JSONObject = self.request("POST", f"/v1/jobs/{job_id}/rerun")
        return answer

    def logs(self, job_id: str, *, stream: str | None = None) -> list[JSONObject]:
        """Every stored log line of the job, oldest first (all pages)."""
        lines: list[JSONObject] = []
        since = 0
        while True:
            params: dict[str, Any] = {"since_seq": since, "limit": 1000}
            if stream:
                params["stream"] = stream
            page = self.request("GET", f"/v1/jobs/{job_id}/logs", params=params)
            lines += page["logs"]
            if not page["logs"] or page.get("next_seq", since) == since:
                return lines
            since = page["next_seq"]

    def events(
        self, job_id: str, *, since: int = 0, reconnect_for: float = 300.0
    ) -> Iterator[JSONObject]:
        """The job's events (``log``, ``metric``, ``phase`` payloads, each with its
        ``seq``) from after ``since`` until its terminal phase. A dropped connection is
        resumed with ``Last-Event-ID``; after ``reconnect_for`` seconds of failing to
        reconnect, :class:`ApiError` (status 0)."""
        last = since
        failing_since: float | None = None
        delay = 0.25
        while True:
            headers = {"Last-Event-ID": str(last)} if last else {}
            try:
                with self._http.stream(
                    "GET",
                    f"/v1/jobs/{job_id}/events",
                    headers=headers,
                    timeout=httpx.Timeout(30.0, read=60.0),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        _answer(response)
                    failing_since, delay = None, 0.25
                    for event in EventSource(response).iter_sse():
                        data: JSONObject = json.loads(event.data)
                        if event.id:  # the last event id seen (kept across events)
                            last = int(event.id)
                        yield data
                        if event.event == "phase" and data.get("phase") in TERMINAL:
                            return
            except httpx.TransportError as exc:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > reconnect_for:
                    raise ApiError(0, f"lost the event stream of {job_id}: {exc}") from None
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            # the server ended the stream without a terminal phase (it is shutting down):
            # resume from the last event seen
            time.sleep(delay)

    # -- catalog, fleet, identity --------------------------------------------------------------

    def stacks(self) -> list[JSONObject]:
        answer: list[JSONObject] = self.request("GET", "/v1/stacks")
        return answer

    def nodes(self) -> list[JSONObject]:
        answer: list[JSONObject] = self.request("GET", "/v1/nodes")
        return answer

    def whoami(self) -> JSONObject:
        answer: JSONObject = self.request("GET", "/v1/auth/whoami")
        return answer

    # -- pipelines and sessions -----------------------------------------------------------------

    def create_pipeline(self, body: JSONObject) -> JSONObject:
        answer: JSONObject = self.request("POST", "/v1/pipelines", json=body)
        return answer

    def pipeline(self, run_id: str) -> JSONObject:
        answer: JSONObject = self.request("GET", f"/v1/pipelines/{run_id}")
        return answer

    def create_session(self, body: JSONObject) -> JSONObject:
        answer: JSONObject = self.request("POST", "/v1/sessions", json=body)
        return answer

    def sessions(self) -> list[JSONObject]:
        answer: list[JSONObject] = self.request("GET", "/v1/sessions")
        return answer

    def session(self, session_id: str) -> JSONObject:
        answer: JSONObject = self.request("GET", f"/v1/sessions/{session_id}")
        return answer

    def stop_session(self, session_id: str) -> JSONObject:
        answer: JSONObject = self.request("DELETE", f"/v1/sessions/{session_id}")
        return answer

    def keepalive(self, session_id: str) -> JSONObject:
        answer: JSONObject = self.request("POST", f"/v1/sessions/{session_id}/keepalive")
        return answer

    def keepalive_many(self, session_ids: list[str]) -> JSONObject:
        """``POST /v1/sessions/keepalive``: ``{sessions, not_found, not_live}``."""
        body = {"ids": session_ids}
        answer: JSONObject = self.request("POST", "/v1/sessions/keepalive", json=body)
        return answer

    # -- issue 40, CLI-A: stacks, secrets, schedules, webhooks, shares, artifacts ------------

    def stack(self, name: str) -> JSONObject:
        """One stack's catalog entry (404 naming the nearest stack)."""
        answer: JSONObject = self.request("GET", f"/v1/stacks/{quote(name, safe='')}")
        return answer

    def secrets(self, *, org: str | None = None) -> list[JSONObject]:
        """The org's secrets: names and times, never values."""
        answer: list[JSONObject] = self.request("GET", "/v1/secrets", params=_org(org))
        return answer

    def set_secret(self, name: str, value: str, *, org: str | None = None) -> JSONObject:
        answer: JSONObject = self.request(
            "PUT", f"/v1/secrets/{quote(name, safe='')}", json={"value": value}, params=_org(org)
        )
        return answer

    def delete_secret(self, name: str, *, org: str | None = None) -> None:
        self.request("DELETE", f"/v1/secrets/{quote(name, safe='')}", params=_org(org))

    def schedules(self, *, limit: int = 100) -> list[JSONObject]:
        answer: list[JSONObject] = self.request("GET", "/v1/schedules", params={"limit": limit})
        return answer

    def create_schedule(self, body: JSONObject) -> JSONObject:
        answer: JSONObject = self.request("POST", "/v1/schedules", json=body)
        return answer

    def schedule(self, schedule_id: str) -> JSONObject:
        answer: JSONObject = self.request("GET", f"/v1/schedules/{schedule_id}")
        return answer

    def patch_schedule(self, schedule_id: str, body: JSONObject) -> JSONObject:
        answer: JSONObject = self.request("PATCH", f"/v1/schedules/{schedule_id}", json=body)
        return answer

    def delete_schedule(self, schedule_id: str) -> JSONObject:
        answer: JSONObject = self.request("DELETE", f"/v1/schedules/{schedule_id}")
        return answer

    def webhooks(self, *, org: str | None = None) -> list[JSONObject]:
        answer: list[JSONObject] = self.request("GET", "/v1/webhooks", params=_org(org))
        return answer

    def create_webhook(self, body: JSONObject) -> JSONObject:
        """WebhookCreated: its signing ``secret`` is in this answer only."""
        answer: JSONObject = self.request("POST", "/v1/webhooks", json=body)
        return answer

    def delete_webhook(self, webhook_id: str) -> JSONObject:
        answer: JSONObject = self.request("DELETE", f"/v1/webhooks/{webhook_id}")
        return answer

    def test_webhook(self, webhook_id: str) -> JSONObject:
        answer: JSONObject = self.request("POST", f"/v1/webhooks/{webhook_id}/test")
        return answer

    def deliveries(self, webhook_id: str) -> list[JSONObject]:
        answer: list[JSONObject] = self.request("GET", f"/v1/webhooks/{webhook_id}/deliveries")
        return answer

    def share(self, job_id: str, *, ttl_hours: int | None = None) -> JSONObject:
        """ShareResult ``{token, code, url, expires_at}``: ``url`` is absolute."""
        body = {"ttl_hours": ttl_hours} if ttl_hours is not None else None
        answer: JSONObject = self.request("POST", f"/v1/jobs/{job_id}/share", json=body)
        return answer

    def unshare(self, job_id: str) -> JSONObject:
        answer: JSONObject = self.request("DELETE", f"/v1/jobs/{job_id}/share")
        return answer

    def embed(self, job_id: str, body: JSONObject) -> JSONObject:
        """EmbedMintResult ``{token, url, expires_at}``."""
        answer: JSONObject = self.request("POST", f"/v1/jobs/{job_id}/embed", json=body)
        return answer

    def artifacts(self, job_id: str) -> list[JSONObject]:
        """The job's stored files ``[{artifact, ref, sha256, size}]``."""
        answer: list[JSONObject] = self.request("GET", f"/v1/jobs/{job_id}/artifacts")
        return answer

    def download(
        self, path: str, dest: Path, on_chunk: Callable[[bytes], None] | None = None
    ) -> int:
        """Stream ``GET path`` (an artifact's ``ref``, or ``/v1/artifacts-zip/JOB``) into
        ``dest`` (written beside it, then renamed: a failed download leaves no partial
        file); the bytes written. ``on_chunk(data)`` for each chunk as it is written (to
        hash it, or show progress)."""
        part = dest.with_name(f".{dest.name}.part")
        try:
            with self._http.stream("GET", path, timeout=httpx.Timeout(30.0, read=300.0)) as got:
                if got.status_code >= 400:
                    got.read()
                    try:
                        _answer(got)
                    except ApiError as exc:
                        exc.path = path
                        raise
                done = 0
                with part.open("wb") as out:
                    for chunk in got.iter_bytes(1 << 20):
                        out.write(chunk)
                        done += len(chunk)
                        if on_chunk is not None:
                            on_chunk(chunk)
            part.replace(dest)
            return done
        except httpx.TransportError as exc:
            raise ApiError(0, f"cannot reach {self.url}: {exc}", path=path) from None
        finally:
            part.unlink(missing_ok=True)

    # -- following runs, job tables (issue 40, CLI-B) -------------------------------------

    def find_jobs(self, *, limit: int = 50, **filters: str | None) -> list[JSONObject]:
        """``GET /v1/jobs`` with any of its filters (``phase``, ``stack``, ``project``,
        ``node``, ``pipeline``, ``array``, ``spec``); a filter of None is left out."""
        params: dict[str, Any] = {k: v for k, v in filters.items() if v}
        params["limit"] = limit
        answer: list[JSONObject] = self.request("GET", "/v1/jobs", params=params)
        return answer

    def pipelines(self, *, limit: int = 50) -> list[JSONObject]:
        """Pipeline runs, newest first (without their stages)."""
        answer: list[JSONObject] = self.request("GET", "/v1/pipelines", params={"limit": limit})
        return answer

    def cancel_pipeline(self, run_id: str) -> JSONObject:
        answer: JSONObject = self.request("POST", f"/v1/pipelines/{run_id}/cancel")
        return answer


def _org(org: str | None) -> dict[str, str]:
    """``?org=`` (the admin token names the org it acts for)."""
    return {"org": org} if org else {}


def _answer(response: httpx.Response) -> Any:
    if response.status_code < 400:
        return response.json() if response.content else None
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    detail = str(problem.get("detail") or f"{response.status_code} {response.reason_phrase}")
    raise ApiError(response.status_code, detail, problem)
