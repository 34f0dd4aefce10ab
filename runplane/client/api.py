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
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Self

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
    """The server answered with a problem (or could not be reached: ``status`` 0)."""

    def __init__(self, status: int, detail: str, problem: JSONObject | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.problem = problem or {}

    @property
    def code(self) -> str:
        return str(self.problem.get("code", ""))

    def hint(self, url: str = "") -> str:
        """What to do next, by status."""
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
            return "check the id (`runplane ls` lists your jobs)"
        if self.status == 429:
            return "your org or user is at its concurrency limit: wait for a run to finish"
        if self.status in (400, 422):
            fields = [f"{e.get('key')}: {e.get('message')}" for e in self.problem.get("errors", [])]
            return "; ".join(fields) if fields else "fix the request and try again"
        if self.status >= 500:
            return "the server could not do it now: try again in a moment"
        return ""


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
        half way; for up to ``RETRY_FOR_SEC`` seconds in all."""
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
            if repeatable and passing and time.monotonic() < deadline:
                time.sleep(_retry_after(response))
                continue
            return _answer(response)

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
