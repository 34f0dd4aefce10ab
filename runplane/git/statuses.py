"""Commit statuses: a run from a git connection's repository reports on its commit
(docs/git.md#commit-statuses), in each provider's shape.

``pending`` when the run starts, then ``success`` (succeeded), ``failure`` (failed or
timed out) or ``error`` (cancelled; GitLab's ``canceled``), under the context
``runplane``. A status is always sent as the job is *now* (a late retry of ``pending``
for a run that has ended sends its end), so retries never leave a stale state behind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from .probe import Credential

CONTEXT = "runplane"
#: A job's phase -> the status it reports (None: nothing to report yet).
STATE_OF = {
    "running": "pending",
    "succeeded": "success",
    "failed": "failure",
    "timeout": "failure",
    "cancelled": "error",
}
_GITLAB_STATE = {
    "pending": "pending",
    "success": "success",
    "failure": "failed",
    "error": "canceled",
}


@dataclass(frozen=True, slots=True)
class StatusCall:
    url: str
    headers: list[tuple[str, str]]
    body: bytes


def repo_path(repo_url: str) -> str:
    """``owner/repo`` (GitLab: ``group/sub/repo``) of an http(s) repository URL."""
    path = urlsplit(repo_url).path.strip("/")
    return path.removesuffix(".git")


def api_base(provider: str, base_url: str) -> str:
    base = base_url.rstrip("/")
    if provider == "github":
        host = urlsplit(base).hostname or ""
        return (
            "https://api.github.com"
            if host in ("github.com", "www.github.com")
            else base + "/api/v3"
        )
    if provider == "gitlab":
        return base + "/api/v4"
    return base + "/api/v1"  # gitea, forgejo


def description(phase: str, error: str) -> str:
    text = {
        "running": "running",
        "succeeded": "succeeded",
        "failed": "failed",
        "timeout": "timed out",
        "cancelled": "cancelled",
    }.get(phase, phase)
    if error and phase in ("failed", "timeout"):
        text += f": {error}"
    return text[:140]


def call(
    provider: str,
    base_url: str,
    repo_url: str,
    credential: Credential,
    *,
    commit: str,
    state: str,
    target_url: str,
    text: str,
) -> StatusCall:
    """The provider's status API request for ``commit``."""
    base = api_base(provider, base_url)
    path = repo_path(repo_url)
    body: dict[str, Any] = {"state": state, "description": text}
    if target_url:
        body["target_url"] = target_url
    if provider == "gitlab":
        url = f"{base}/projects/{quote(path, safe='')}/statuses/{commit}"
        body.update(state=_GITLAB_STATE[state], name=CONTEXT)
        headers = [("PRIVATE-TOKEN", credential.secret)]
    elif provider == "github":
        url = f"{base}/repos/{path}/statuses/{commit}"
        body["context"] = CONTEXT
        headers = [
            ("Authorization", f"Bearer {credential.secret}"),
            ("Accept", "application/vnd.github+json"),
        ]
    else:
        url = f"{base}/repos/{path}/statuses/{commit}"
        body["context"] = CONTEXT
        headers = [("Authorization", f"token {credential.secret}")]
    headers.append(("Content-Type", "application/json"))
    return StatusCall(url, headers, json.dumps(body, separators=(",", ":")).encode())
