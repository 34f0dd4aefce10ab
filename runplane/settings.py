"""Deployment settings: every ``RUNPLANE_*`` variable, parsed and validated once at start-up.

A bad value stops start-up with one line that names the setting and what it accepts
(``SettingsError``); nothing downstream re-reads the environment.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: Feature areas that ``RUNPLANE_DISABLE`` may switch off (each then answers 503).
AREAS = (
    "streams",
    "pipelines",
    "sessions",
    "webhooks",
    "node_sharing",
    "policy",
    "enrollment",
    "teleop",
    "git",
    "schedules",
)

SECRET_KEY_FILE = "secret.key"
SECRET_KEY_BYTES = 32


class SettingsError(ValueError):
    """A setting has a value we cannot use; the message is one line meant for the operator."""


#: node trust tiers (``placement.Tier`` labels), for ``RUNPLANE_CROSS_ORG_PREEMPTION_TIERS``
TIERS = ("community", "partner", "trusted")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A token bucket's shape: ``per_sec`` requests a second on average, ``burst`` at once
    (``RUNPLANE_RATE_LIMIT``; docs/operations.md "Rate limits")."""

    per_sec: float
    burst: int


#: ``RUNPLANE_RATE_LIMIT`` / ``_ADDRESS`` value ``off``: nothing is limited
RATE_OFF = RateLimit(0.0, 0)
#: the limits a deploy with ``RUNPLANE_AUTH=required`` has unless it sets its own (an open
#: deploy has none): per credential, and per source address
RATE_LIMIT_DEFAULT = RateLimit(2000.0, 4000)
RATE_LIMIT_ADDRESS_DEFAULT = RateLimit(10.0, 100)
_RATE_UNITS = {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(
    r"(?P<n>[0-9]+(?:\.[0-9]+)?)\s*/\s*(?P<unit>[a-z]+)(?:\s*,\s*burst\s*=\s*(?P<burst>[0-9]+))?"
)
RATE_SYNTAX = "accepted: off, or N/s, N/min or N/h with an optional ,burst=M (e.g. 20/s,burst=100)"


def parse_rate(text: str) -> RateLimit:
    """``off``, or ``N/s`` (``/min``, ``/h``) with an optional ``,burst=M`` (default: N, one
    unit's worth at once); ``ValueError`` naming the syntax otherwise."""
    value = text.strip().lower()
    if value in ("off", "0"):
        return RATE_OFF
    match = _RATE.fullmatch(value)
    unit = _RATE_UNITS.get(match.group("unit")) if match else None
    if match is None or unit is None:
        raise ValueError(RATE_SYNTAX)
    count = float(match.group("n"))
    burst = int(match.group("burst")) if match.group("burst") else math.ceil(count)
    if count <= 0 or burst < 1 or count > 1e6 or burst > 1e9:
        raise ValueError("N and burst must be above 0 (N at most 1000000); " + RATE_SYNTAX)
    return RateLimit(count / unit, burst)


def _comma_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(v).strip() for v in value if str(v).strip()]


class Settings(BaseSettings):
    """The deployment's settings. Field ``x`` is read from ``RUNPLANE_X``."""

    model_config = SettingsConfigDict(
        env_prefix="RUNPLANE_", extra="ignore", frozen=True, validate_default=True
    )

    data_dir: Path = Path(".runplane")
    database_url: str | None = None
    auth: Literal["off", "shadow", "required"] = "off"
    admin_token: SecretStr | None = None
    #: a bearer that may read ``/metrics`` (docs/operations.md "Metrics"), for a scraper
    metrics_token: SecretStr | None = None
    secret_key: SecretStr | None = None
    public_url: str | None = None
    max_cpu: int = Field(128, ge=1)
    max_ram: int = Field(1024, ge=1)
    max_gpu: int = Field(16, ge=0)
    max_timeout_sec: int = Field(604800, ge=1)
    max_concurrent_org: int = Field(100, ge=0)
    max_concurrent_user: int = Field(0, ge=0)
    #: whether a job that does not say is preemptible (the platform layer's
    #: ``preemptible_default``; docs/placement.md "Preemption")
    preemptible_default: bool = False
    #: the longest grace a job may ask between SIGTERM and SIGKILL when preempted
    max_preempt_grace_sec: int = Field(300, ge=1, le=86400)
    #: the grace of a preempted job that does not ask for its own (within the cap)
    preempt_grace_sec: int = Field(30, ge=1, le=86400)
    #: node trust tiers on which a job may preempt jobs of another org (default: none,
    #: preemption stays within an org)
    cross_org_preemption_tiers: Annotated[tuple[str, ...], NoDecode] = ()
    max_upload_mb: int = Field(512, ge=1)
    session_idle_ttl_sec: int = Field(300, ge=1)
    disable: Annotated[frozenset[str], NoDecode] = frozenset()
    egress_allow: Annotated[tuple[str, ...], NoDecode] = ()
    stacks_dir: Path | None = None
    local_agent: bool = True
    #: days a finished job's logs, metric points, stream points and artifacts are kept
    #: (0: forever; an org's policy document may override it; docs/operations.md)
    retention_days: int = Field(30, ge=0, le=36500)
    #: seconds between the retention janitor's sweeps
    retention_sweep_sec: float = Field(300.0, ge=1.0, le=86400.0)
    #: half-life (seconds) of an org's usage history in fair share (docs/placement.md)
    fair_share_half_life_sec: float = Field(600.0, ge=1.0, le=30 * 86400.0)
    #: chunks each realtime stream's replay ring keeps (docs/streams.md)
    stream_ring: int = Field(1024, ge=16, le=1_000_000)
    #: the in-process agent's executor (``runplane agent --executor``)
    local_agent_executor: Literal["process", "sandbox", "container"] = "process"
    #: the in-process agent's slots (``runplane agent --max-concurrency``; 0: its cores)
    local_agent_max_concurrency: int = Field(0, ge=0, le=4096)
    #: the cores that agent offers to placement (0: those counted; more oversubscribes
    #: them, as Slurm's ``CPUs=`` does: each job without limits reserves one)
    local_agent_cpu_cores: int = Field(0, ge=0, le=4096)
    #: replicas on one PostgreSQL, one leader at a time (docs/operations.md "High
    #: availability"); needs a postgresql:// database and no in-process agent
    ha: bool = False
    #: seconds a leader's lease lasts without renewal (renewed every third of it)
    ha_lease_sec: float = Field(3.0, ge=1.0, le=60.0)
    #: the URL the other replicas reach this one at (default: the bound address)
    ha_advertise_url: str | None = None
    #: registry -> mirror its images are pulled from (``docker.io=127.0.0.1:5000``,
    #: docs/containers.md); a registry named here or in ``insecure_registries`` passes
    #: the egress guard
    registry_mirrors: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    #: registries (``host[:port]``) reached over plain HTTP
    insecure_registries: Annotated[tuple[str, ...], NoDecode] = ()
    #: whether a stack's declared image is resolved at submit (``resolve``: such jobs are
    #: image jobs) or left as written (``declared``: they run on the host as before)
    stack_images: Literal["declared", "resolve"] = "declared"
    #: requests per credential (access token, login session): ``off`` or ``N/s[,burst=M]``;
    #: unset: off on an open deploy, RATE_LIMIT_DEFAULT with ``auth=required``
    rate_limit: Annotated[RateLimit | None, NoDecode] = None
    #: requests per source address without a credential, and logins and node enrollments
    #: from it whatever they present; unset as for ``rate_limit``
    rate_limit_address: Annotated[RateLimit | None, NoDecode] = None
    #: the hot routes answered by the lean ASGI lanes in front of Quart (submit, batch,
    #: the agents' WebSocket, SSE writes; docs/lean-lanes.md); off: Quart answers
    #: every request (the same bytes, slower)
    lean_lanes: bool = True

    @field_validator(
        "database_url",
        "public_url",
        "admin_token",
        "metrics_token",
        "secret_key",
        "ha_advertise_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is None or value == "memory":
            return value
        if value.startswith(("postgresql://", "postgres://")):
            return value
        raise ValueError("accepted: unset (embedded SQLite), 'memory', or 'postgresql://...'")

    @field_validator("ha")
    @classmethod
    def _ha(cls, value: bool, info: ValidationInfo) -> bool:
        if not value:
            return value
        url = info.data.get("database_url") or ""
        if not url.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                "accepted: 1 only with RUNPLANE_DATABASE_URL=postgresql://... (the replicas "
                "share that database)"
            )
        if info.data.get("local_agent", True):
            raise ValueError(
                "accepted: 1 only with RUNPLANE_LOCAL_AGENT=0 (an in-process agent would "
                "die with its replica): run `runplane agent --server URL,URL` on each node"
            )
        return value

    @field_validator("public_url", "ha_advertise_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")) or value[-3:] == "://":
            raise ValueError("accepted: an origin such as 'https://runplane.example.com'")
        return value.rstrip("/")

    @field_validator("admin_token", "metrics_token")
    @classmethod
    def _admin_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("accepted: a token of at least 16 characters")
        return value

    @field_validator("secret_key")
    @classmethod
    def _secret_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(_decode_key(value.get_secret_value()) or b"") < 32:
            raise ValueError("accepted: 64 hex characters (32 bytes), e.g. `openssl rand -hex 32`")
        return value

    @field_validator("disable", mode="before")
    @classmethod
    def _disable(cls, value: Any) -> frozenset[str]:
        areas = _comma_list(value)
        unknown = [a for a in areas if a not in AREAS]
        if unknown:
            raise ValueError(f"unknown area {unknown[0]!r}; accepted: {', '.join(AREAS)}")
        return frozenset(areas)

    @field_validator("cross_org_preemption_tiers", mode="before")
    @classmethod
    def _tiers(cls, value: Any) -> tuple[str, ...]:
        tiers = tuple(_comma_list(value))
        unknown = [t for t in tiers if t not in TIERS]
        if unknown:
            raise ValueError(f"unknown tier {unknown[0]!r}; accepted: {', '.join(TIERS)}")
        return tiers

    @field_validator("egress_allow", mode="before")
    @classmethod
    def _egress_allow(cls, value: Any) -> tuple[str, ...]:
        entries = _comma_list(value)
        for entry in entries:
            if "/" in entry:
                try:
                    ipaddress.ip_network(entry, strict=False)
                except ValueError:
                    raise ValueError(
                        f"{entry!r} is not a valid CIDR; accepted: hosts or CIDRs, comma-separated"
                    ) from None
            elif not entry or any(c.isspace() for c in entry):
                raise ValueError("accepted: hosts or CIDRs, comma-separated")
        return tuple(entries)

    @field_validator("registry_mirrors", mode="before")
    @classmethod
    def _registry_mirrors(cls, value: Any) -> dict[str, str]:
        if isinstance(value, dict):
            return {_registry_host(k): _registry_host(v) for k, v in value.items()}
        mirrors: dict[str, str] = {}
        for entry in _comma_list(value):
            registry, eq, mirror = entry.partition("=")
            if not eq:
                raise ValueError(
                    f"{entry!r} is not registry=mirror; accepted: comma-separated "
                    "registry=mirror pairs, e.g. docker.io=127.0.0.1:5000"
                )
            mirrors[_registry_host(registry)] = _registry_host(mirror)
        return mirrors

    @field_validator("insecure_registries", mode="before")
    @classmethod
    def _insecure_registries(cls, value: Any) -> tuple[str, ...]:
        return tuple(_registry_host(entry) for entry in _comma_list(value))

    @field_validator("rate_limit", "rate_limit_address", mode="before")
    @classmethod
    def _rate_limit(cls, value: Any) -> RateLimit | None:
        if value is None or isinstance(value, RateLimit):
            return value
        if isinstance(value, str) and not value.strip():
            return None  # empty is unset: the mode's default
        return parse_rate(str(value))

    def rate_limits(self) -> tuple[RateLimit | None, RateLimit | None]:
        """The limits in force (per credential, per address); None where off. Unset, they
        are off on an open deploy and the defaults with ``RUNPLANE_AUTH=required``."""
        required = self.auth == "required"
        credential = self.rate_limit or (RATE_LIMIT_DEFAULT if required else None)
        address = self.rate_limit_address or (RATE_LIMIT_ADDRESS_DEFAULT if required else None)
        return (
            None if credential == RATE_OFF else credential,
            None if address == RATE_OFF else address,
        )

    @field_validator("stacks_dir")
    @classmethod
    def _stacks_dir(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(
                f"{str(value)!r} is not a directory; accepted: a directory of stack manifests"
            )
        return value

    def area_enabled(self, area: str) -> bool:
        if area not in AREAS:
            raise KeyError(area)
        return area not in self.disable

    def secret_key_bytes(self) -> bytes:
        """The key material for sealing and signing (set by ``ensure_secret_key``)."""
        if self.secret_key is None:
            raise RuntimeError("secret key not loaded: call ensure_secret_key() at start-up")
        key = _decode_key(self.secret_key.get_secret_value())
        assert key is not None
        return key


_REGISTRY_HOST = re.compile(
    r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?|\[[0-9a-f:.]+\](:[0-9]{1,5})?"
)
#: Docker Hub's other names (images are ``docker.io/...``)
_HUB_ALIASES = ("index.docker.io", "registry-1.docker.io")


def _registry_host(text: str) -> str:
    """A registry's ``host[:port]``, lowercase (Docker Hub's aliases as ``docker.io``)."""
    host = text.strip().lower()
    if not _REGISTRY_HOST.fullmatch(host):
        raise ValueError(f"{text.strip()[:80]!r} is not a registry; accepted: host[:port] entries")
    return "docker.io" if host in _HUB_ALIASES else host


def _decode_key(text: str) -> bytes | None:
    try:
        return bytes.fromhex(text.strip())
    except ValueError:
        return None


def _env_name(field: str) -> str:
    return "RUNPLANE_" + field.upper()


_ACCEPTED_HINTS: dict[str, Callable[[ErrorDetails], str]] = {
    "literal_error": lambda err: (
        "accepted: "
        + ", ".join(re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", ""))))
    ),
    "bool_parsing": lambda err: "accepted: 1, 0, true, false, yes, no",
    "int_parsing": lambda err: "accepted: an integer",
}


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else "?"
    raw = err.get("input")
    shown = "(secret)" if field in {"admin_token", "metrics_token", "secret_key"} else repr(raw)
    hint_fn = _ACCEPTED_HINTS.get(err["type"])
    if hint_fn is not None:
        hint = hint_fn(err)
    else:
        hint = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] in {"greater_than_equal", "less_than_equal"}:
            info = Settings.model_fields.get(field)
            kind = "a number" if info is not None and info.annotation is float else "an integer"
            hint = f"accepted: {kind} " + hint.removeprefix("Input should be ")
    return f"{_env_name(field)}={shown} is not valid: {hint}"


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the settings; raise ``SettingsError`` with one clear line."""
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for name in Settings.model_fields:
        key = _env_name(name)
        if key in env:
            values[name] = env[key]
    try:
        # Settings are read from the explicit mapping only (not os.environ twice).
        return Settings.model_validate(values)
    except ValidationError as exc:
        raise SettingsError(_one_line(exc)) from None


def ensure_secret_key(settings: Settings) -> Settings:
    """Return settings with a secret key: the configured one, or one generated once into
    ``<data_dir>/secret.key`` with mode 0600 and reused on every later start."""
    if settings.secret_key is not None:
        return settings
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # database, keys
    path = settings.data_dir / SECRET_KEY_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(SECRET_KEY_BYTES) + "\n")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise SettingsError(
            f"{path} is readable by others (mode {mode:o}): run `chmod 600 {path}` "
            "or set RUNPLANE_SECRET_KEY"
        )
    text = path.read_text().strip()
    if len(_decode_key(text) or b"") < SECRET_KEY_BYTES:
        raise SettingsError(f"{path} does not hold 64 hex characters: delete it to regenerate")
    return settings.model_copy(update={"secret_key": SecretStr(text)})
