"""The registry v2 client: a tag (or digest) to the manifest digest and its platforms.

``GET /v2/<name>/manifests/<tag>`` asking for an OCI index, an OCI manifest, a Docker
manifest list or a Docker v2 manifest; the digest is the sha256 of the body, checked
against ``Docker-Content-Digest`` (and against the digest asked for, if one was). The
platforms (``os/arch[/variant]``) come from an index's entries or, for a single
manifest, from its config blob. Auth: a ``401`` with ``WWW-Authenticate: Bearer realm=,
service=, scope=`` is the token flow (Docker Hub, GHCR: the realm asked for a pull token,
with the org's credential as Basic auth when it has one); ``Basic`` sends the credential.
Every call goes through the server's outgoing HTTP (``runplane/outbound.py``) after the
egress guard. Failures are :class:`RegistryError`: ``unknown`` (no such repository or
tag), ``denied`` (the registry refused us: the reason is its own), ``refused`` (the
egress guard), ``unavailable`` (no answer, a 5xx, a body that is not what it says).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlencode, urljoin

from runplane import egress, outbound

from .reference import Reference
from .routing import Endpoint

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
INDEXES = (OCI_INDEX, DOCKER_LIST)
#: the most of a manifest (or a config blob) read; registries cap manifests at 4 MiB
BODY_CAP = 4 * 1024 * 1024
#: each call's answer must come within (the head), and not stall longer than
CALL_SEC = 10.0
MAX_REDIRECTS = 3
_PARAM = re.compile(r'(\w+)="([^"]*)"')

Kind = Literal["unknown", "denied", "refused", "unavailable"]


class RegistryError(Exception):
    def __init__(self, kind: Kind, reason: str, retry_after: int | None = None) -> None:
        self.kind = kind
        self.reason = reason
        self.retry_after = retry_after
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class Basic:
    """A registry credential (an org's, ``/v1/registries``)."""

    username: str
    password: str = field(repr=False)

    def header(self) -> str:
        pair = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode()


@dataclass(frozen=True, slots=True)
class Resolved:
    digest: str
    platforms: list[str]


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def _reason(answer: _Answer) -> str:
    """The registry's own words: ``CODE: message`` of its first error, else the status."""
    try:
        errors = json.loads(answer.body)["errors"]
        first = errors[0]
        return f"{first.get('code', '')}: {first.get('message', '')}".strip(": ")[:300]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return f"HTTP {answer.status}"


async def _exchange(url: str, headers: list[tuple[str, str]], allow: egress.Allow) -> _Answer:
    """One GET of ``url`` past the egress guard, its body read up to :data:`BODY_CAP`."""
    try:
        target, addresses = await egress.check(url, allow, timeout=CALL_SEC)
        upstream = await outbound.open_stream(
            "GET", target, addresses, headers=headers, head_within=CALL_SEC, idle_within=CALL_SEC
        )
        try:
            body = bytearray()
            async for chunk in upstream.chunks():
                body += chunk
                if len(body) > BODY_CAP:
                    raise RegistryError("unavailable", f"{target.host}: an answer over 4 MiB")
        finally:
            await upstream.aclose()
    except egress.EgressRefused as exc:
        raise RegistryError("refused", str(exc)) from None
    except (egress.EgressUnreachable, egress.BadUrl, outbound.SendError) as exc:
        raise RegistryError("unavailable", str(exc)) from None
    return _Answer(upstream.status, upstream.headers, bytes(body))


class _Session:
    """Calls to one repository of one registry, with the auth its challenges ask for."""

    def __init__(self, endpoint: Endpoint, repository: str, auth: Basic | None) -> None:
        self.endpoint = endpoint
        self.repository = repository
        self.auth = auth
        self.authorization: str | None = None

    async def get(self, path: str, accept: str = "") -> _Answer:
        answer = await self._follow(path, accept)
        if answer.status == 401 and self.authorization is None:
            challenge = answer.headers.get("www-authenticate", "")
            scheme = challenge.split(" ", 1)[0].lower()
            if scheme == "bearer":
                self.authorization = "Bearer " + await self._token(challenge)
            elif scheme == "basic" and self.auth is not None:
                self.authorization = self.auth.header()
            else:
                return answer
            answer = await self._follow(path, accept)
        return answer

    async def _follow(self, path: str, accept: str) -> _Answer:
        """GET ``path`` of the registry, following a blob's redirect (a CDN, without our
        Authorization)."""
        url = self.endpoint.origin + path
        headers = [("Accept", accept)] if accept else []
        if self.authorization:
            headers.append(("Authorization", self.authorization))
        for _ in range(MAX_REDIRECTS + 1):
            answer = await _exchange(url, headers, self.endpoint.allow)
            location = answer.headers.get("location")
            if answer.status not in (301, 302, 303, 307, 308) or not location:
                return answer
            url = urljoin(url, location)
            if not url.startswith(self.endpoint.origin + "/"):
                headers = [h for h in headers if h[0] != "Authorization"]
        raise RegistryError("unavailable", f"more than {MAX_REDIRECTS} redirects")

    async def _token(self, challenge: str) -> str:
        params = dict(_PARAM.findall(challenge))
        realm = params.get("realm")
        if not realm:
            raise RegistryError("unavailable", "a Bearer challenge without a realm")
        query = {"scope": params.get("scope") or f"repository:{self.repository}:pull"}
        if params.get("service"):
            query["service"] = params["service"]
        url = realm + ("&" if "?" in realm else "?") + urlencode(query)
        headers = [("Authorization", self.auth.header())] if self.auth else []
        answer = await _exchange(url, headers, self.endpoint.allow)
        if answer.status in (401, 403):
            raise RegistryError("denied", f"the token service refused: {_reason(answer)}")
        if answer.status != 200:
            raise RegistryError("unavailable", f"the token service answered {answer.status}")
        try:
            doc = json.loads(answer.body)
            token = doc.get("token") or doc.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryError("unavailable", "the token service gave no token")
        return token


def _failure(answer: _Answer, what: str, with_credential: bool) -> RegistryError:
    reason = f"{what}: {_reason(answer)}"
    if answer.status == 404:
        return RegistryError("unknown", reason)
    if answer.status in (401, 403):
        hint = (
            "the registry refused the org's credential"
            if with_credential
            else "no such repository, or it needs a credential (POST /v1/registries)"
        )
        return RegistryError("denied", f"{reason} ({hint})")
    retry = answer.headers.get("retry-after", "")
    return RegistryError(
        "unavailable",
        f"{what}: the registry answered {answer.status}",
        int(retry) if retry.isdigit() else None,
    )


def _checked(answer: _Answer, expected: str) -> str:
    """The body's digest; refused when the registry claims (or we asked for) another."""
    digest = "sha256:" + hashlib.sha256(answer.body).hexdigest()
    claimed = answer.headers.get("docker-content-digest")
    for want in (claimed, expected):
        if want and want != digest:
            raise RegistryError("unavailable", f"the body's digest is {digest}, not {want}")
    return digest


def _platform(doc: Any) -> str:
    if not isinstance(doc, dict) or not doc.get("os") or not doc.get("architecture"):
        return ""
    variant = doc.get("variant")
    return f"{doc['os']}/{doc['architecture']}" + (f"/{variant}" if variant else "")


async def resolve(ref: Reference, endpoint: Endpoint, auth: Basic | None) -> Resolved:
    """The manifest digest ``ref`` names now, and its platforms; :class:`RegistryError`."""
    session = _Session(endpoint, ref.repository, auth)
    answer = await session.get(f"/v2/{ref.repository}/manifests/{ref.wanted}", ACCEPT)
    if answer.status != 200:
        raise _failure(answer, f"{ref}", auth is not None)
    digest = _checked(answer, ref.digest)
    try:
        doc = json.loads(answer.body)
        media = answer.headers.get("content-type", "").split(";")[0].strip()
        media = doc.get("mediaType") or media
    except (ValueError, AttributeError):
        raise RegistryError("unavailable", f"{ref}: the manifest is not JSON") from None
    if media in INDEXES:
        found = [_platform(m.get("platform")) for m in doc.get("manifests") or []]
        platforms = [p for p in found if p and not p.startswith("unknown/")]
    else:
        config = (doc.get("config") or {}).get("digest", "")
        blob = await session.get(f"/v2/{ref.repository}/blobs/{config}")
        if blob.status != 200:
            raise _failure(blob, f"{ref}'s config", auth is not None)
        _checked(blob, config)
        try:
            platforms = [p for p in (_platform(json.loads(blob.body)),) if p]
        except ValueError:
            platforms = []
    return Resolved(digest, sorted(set(platforms)))
