"""Talking to a git repository with a connection's credential, from the server: the git
CLI's ``ls-remote`` (resolve a ref to a commit, check a connection works), bounded in time.

The credential never goes on a command line or into a file git keeps: a PAT travels as
an ``http.extraHeader`` set through ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n`` environment
variables (seen by this git process only); a deploy key is written to a 0600 file in a
private temporary directory for the one command and removed right after. Prompts are
off (``GIT_TERMINAL_PROMPT=0``, ssh ``BatchMode``), so a refused credential fails at once.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import trio

#: The username each provider takes with a token as the password (HTTP Basic).
TOKEN_USER = {
    "github": "x-access-token",
    "gitlab": "oauth2",
    "gitea": "runplane",
    "forgejo": "runplane",
}
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_REFUSED = re.compile(
    r"authentication failed|could not read username|permission denied|403|401|"
    r"invalid username or password|terminal prompts disabled",
    re.IGNORECASE,
)


class GitProbeError(Exception):
    """The repository could not be reached or refused us; ``refused``: the credential."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True, slots=True)
class Credential:
    provider: str
    auth_kind: str  # https_pat | ssh_deploy_key
    secret: str  # the PAT or the private key, in clear (never logged)

    def header(self) -> str:
        """The ``Authorization`` header value for https (a PAT)."""
        user = TOKEN_USER.get(self.provider, "git")
        token = base64.b64encode(f"{user}:{self.secret}".encode()).decode("ascii")
        return f"Basic {token}"


def git_env(credential: Credential | None, key_file: Path | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        # a git host with a private CA: SSL_CERT_FILE / GIT_SSL_CAINFO as for any git
        if k
        in (
            "PATH",
            "HOME",
            "LANG",
            "LC_ALL",
            "TMPDIR",
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
            "GIT_SSL_CAINFO",
        )
    }
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", GCM_INTERACTIVE="never")
    if credential is not None and credential.auth_kind == "https_pat":
        env.update(
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="http.extraHeader",
            GIT_CONFIG_VALUE_0=f"Authorization: {credential.header()}",
        )
    if key_file is not None:
        env["GIT_SSH_COMMAND"] = (
            f"ssh -i {key_file} -o IdentitiesOnly=yes -o BatchMode=yes "
            "-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=/dev/null"
        )
    return env


async def run_git(
    args: list[str], credential: Credential | None, *, within: float, what: str
) -> bytes:
    """Run ``git <args>`` with the credential (bounded by ``within``); its stdout.
    :class:`GitProbeError` when it fails (its last line of stderr, the secret masked),
    times out, or git is missing."""
    tmp: str | None = None
    try:
        key_file = None
        if credential is not None and credential.auth_kind == "ssh_deploy_key":
            tmp = tempfile.mkdtemp(prefix="runplane-git-")
            key_file = Path(tmp) / "key"
            secret = (
                credential.secret if credential.secret.endswith("\n") else credential.secret + "\n"
            )
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secret)
        with trio.move_on_after(within) as waited:
            try:
                done = await trio.run_process(
                    ["git", *args],
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                    env=git_env(credential, key_file),
                )
            except FileNotFoundError:
                raise GitProbeError("git is not installed on the server") from None
        if waited.cancelled_caught:
            raise GitProbeError(f"the repository did not answer within {within:g} s")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        last = said[-1][:300] if said else f"{what} exited {done.returncode}"
        if credential is not None:
            last = last.replace(credential.secret, "***")
        raise GitProbeError(last, refused=bool(_REFUSED.search(" ".join(said))))
    return done.stdout


async def ls_remote(
    repo_url: str, credential: Credential | None, patterns: tuple[str, ...], *, within: float
) -> dict[str, str]:
    """``git ls-remote`` of ``patterns`` (empty: every ref): ref name -> commit."""
    out = await run_git(
        ["ls-remote", "--", repo_url, *patterns], credential, within=within, what="git ls-remote"
    )
    refs: dict[str, str] = {}
    for line in out.decode("utf-8", "replace").splitlines():
        sha, _, name = line.partition("\t")
        if _SHA.match(sha):
            refs[name] = sha
    return refs


async def resolve(
    repo_url: str, credential: Credential | None, ref: str, *, within: float
) -> str | None:
    """The commit ``ref`` (a branch, a tag, ``HEAD`` or a full sha) names, or None."""
    if _SHA.match(ref.lower()):
        return ref.lower()  # a full commit id is taken as it is (the clone checks it exists)
    candidates = (ref, f"refs/heads/{ref}", f"refs/tags/{ref}", f"refs/tags/{ref}^{{}}")
    # an annotated tag's commit is listed (as ``<tag>^{}``) only when asked for by name
    refs = await ls_remote(repo_url, credential, (ref, f"{ref}^{{}}"), within=within)
    found = None
    for name in candidates:
        if name in refs:
            found = refs[name]
    return found
