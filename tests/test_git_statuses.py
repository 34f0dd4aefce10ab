"""Commit status requests in each provider's shape (runplane/git/statuses.py); sending
them for real against a fake provider: tests/e2e/test_git_workspace_e2e.py."""

from __future__ import annotations

import json

from runplane.git import statuses
from runplane.git.probe import Credential

SHA = "a" * 40


def call(provider: str, base: str, repo: str, state: str) -> statuses.StatusCall:
    return statuses.call(
        provider,
        base,
        repo,
        Credential(provider, "https_pat", "tok"),
        commit=SHA,
        state=state,
        target_url="https://rp/runs/job_1",
        text="running",
    )


def test_github_com_and_enterprise() -> None:
    dotcom = call("github", "https://github.com", "https://github.com/acme/rover.git", "pending")
    assert dotcom.url == f"https://api.github.com/repos/acme/rover/statuses/{SHA}"
    assert ("Authorization", "Bearer tok") in dotcom.headers
    body = json.loads(dotcom.body)
    assert body == {
        "state": "pending",
        "description": "running",
        "target_url": "https://rp/runs/job_1",
        "context": "runplane",
    }
    ghe = call("github", "https://git.corp/", "https://git.corp/acme/rover", "success")
    assert ghe.url == f"https://git.corp/api/v3/repos/acme/rover/statuses/{SHA}"


def test_gitlab_encodes_the_project_path_and_says_canceled() -> None:
    got = call("gitlab", "https://gitlab.example", "https://gitlab.example/g/sub/app.git", "error")
    assert got.url == f"https://gitlab.example/api/v4/projects/g%2Fsub%2Fapp/statuses/{SHA}"
    assert ("PRIVATE-TOKEN", "tok") in got.headers
    body = json.loads(got.body)
    assert (body["state"], body["name"]) == ("canceled", "runplane")
    assert json.loads(call("gitlab", "https://g", "https://g/a/b", "failure").body)["state"] == (
        "failed"
    )


def test_gitea_and_forgejo() -> None:
    for provider in ("gitea", "forgejo"):
        got = call(provider, "https://code.example", "https://code.example/o/r.git", "failure")
        assert got.url == f"https://code.example/api/v1/repos/o/r/statuses/{SHA}"
        assert ("Authorization", "token tok") in got.headers
        assert json.loads(got.body)["state"] == "failure"


def test_phases_map_to_states_and_descriptions() -> None:
    assert statuses.STATE_OF == {
        "running": "pending",
        "succeeded": "success",
        "failed": "failure",
        "timeout": "failure",
        "cancelled": "error",
    }
    assert statuses.description("timeout", "timed out after 60 s") == (
        "timed out: timed out after 60 s"
    )
    assert statuses.description("cancelled", "by user") == "cancelled"
    assert len(statuses.description("failed", "x" * 500)) == 140
