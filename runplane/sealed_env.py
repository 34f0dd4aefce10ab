"""Plain env values that look secret, sealed at rest (docs/secrets.md "Plain values").

A job's env may carry a credential as a plain value (``HF_TOKEN=hf_...``) rather than as a
``${secrets.NAME}`` reference. The views have always shown such values ``[redacted]``; the
store keeps them sealed too: before the job's row is written, every env value whose name
looks secret (:func:`looks_secret`, the names the views redact) is replaced by
:data:`MARK` and its AES-256-GCM sealed text kept beside the env under :data:`KEY`
(``<org>/env/<VAR>`` as associated data; a session pod's services likewise, each under its
own env). The run order of an attempt opens them again (:func:`opened_doc`), and the agent
masks them in the job's output as it masks org secrets. ``spec_hash`` is computed over the
plain values before sealing, so equal jobs still hash equal.

The functions take a document as stored: a job spec's stored mapping (``JobSpec.stored``;
``runplane/jobs/jobspec.py`` has the typed ``sealed``/``opened``) or a pipeline stage's or
a schedule's stored body.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from runplane.sealing import Sealer

#: What a sealed value reads as in a stored env.
MARK = "${sealed}"
#: The key (beside ``env``) holding the sealed values, by variable name.
KEY = "env_sealed"

_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|KEY|CREDENTIAL|AUTH|PRIVATE|COOKIE|SESSION",
    re.IGNORECASE,
)
#: A reference to an org secret, ``${secrets.NAME}`` (docs/secrets.md): group 1 is NAME.
REF = re.compile(r"\$\{secrets\.([A-Za-z_][A-Za-z0-9_]{0,63})\}")
#: What a view shows for a secret-looking env value.
REDACTED = "[redacted]"


def looks_secret(name: str) -> bool:
    """Whether an env variable's name says it holds a secret (views redact its value)."""
    return bool(_SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as a view shows it: secret-looking values :data:`REDACTED`."""
    return {k: (REDACTED if looks_secret(k) else v) for k, v in env.items()}


def _sealable(env: Mapping[str, str]) -> list[str]:
    return [
        var
        for var, value in env.items()
        if looks_secret(var) and value and value != MARK and not REF.fullmatch(value)
    ]


def wants_sealing(doc: Mapping[str, Any]) -> bool:
    """Whether ``doc`` holds a plain value :func:`sealed_doc` would seal."""
    return bool(_sealable(doc.get("env") or {})) or any(
        _sealable(s.get("env") or {}) for s in doc.get("pod") or ()
    )


def _aad(org_id: str, where: str, var: str) -> str:
    return f"{org_id}/{where}/{var}"


def _seal_env(
    env: Mapping[str, str], sealer: Sealer, org_id: str, where: str
) -> tuple[dict[str, str], dict[str, str]]:
    plain, sealed = dict(env), {}
    for var in _sealable(env):
        sealed[var] = sealer.seal(env[var], aad=_aad(org_id, where, var))
        plain[var] = MARK
    return plain, sealed


def _open_env(
    env: Mapping[str, str], sealed: Mapping[str, str], sealer: Sealer, org_id: str, where: str
) -> tuple[dict[str, str], list[str]]:
    opened = dict(env)
    values = []
    for var, text in sealed.items():
        value = sealer.open(text, aad=_aad(org_id, where, var))
        if opened.get(var) == MARK:
            opened[var] = value
            values.append(value)
    return opened, values


def sealed_doc(doc: Mapping[str, Any], sealer: Callable[[], Sealer], org_id: str) -> dict[str, Any]:
    """``doc`` as stored: secret-looking plain env values (the job's, its pod services')
    sealed with ``sealer()`` (asked for only then); unchanged when it has none."""
    if not wants_sealing(doc):
        return dict(doc)
    return _sealed_doc(doc, sealer(), org_id)


def _sealed_doc(doc: Mapping[str, Any], sealer: Sealer, org_id: str) -> dict[str, Any]:
    out = dict(doc)
    env, sealed = _seal_env(doc.get("env") or {}, sealer, org_id, "env")
    if sealed:
        out["env"], out[KEY] = env, {**(doc.get(KEY) or {}), **sealed}
    if doc.get("pod"):
        services = []
        for service in doc["pod"]:
            where = f"pod/{service['name']}/env"
            env, sealed = _seal_env(service.get("env") or {}, sealer, org_id, where)
            services.append(
                {**service, "env": env, KEY: {**(service.get(KEY) or {}), **sealed}}
                if sealed
                else service
            )
        out["pod"] = services
    return out


def opened_doc(
    doc: Mapping[str, Any], sealer: Callable[[], Sealer], org_id: str
) -> tuple[dict[str, Any], list[str]]:
    """``doc`` with its sealed env values put back (for a run order, or a rerun's new
    row), and those values (for the agent to mask); ``sealer()`` is asked for only when
    something is sealed."""
    if not has_sealed(doc):
        return dict(doc), []
    return _opened_doc(doc, sealer(), org_id)


def _opened_doc(
    doc: Mapping[str, Any], sealer: Sealer, org_id: str
) -> tuple[dict[str, Any], list[str]]:
    out = {k: v for k, v in doc.items() if k != KEY}
    values: list[str] = []
    if doc.get(KEY):
        out["env"], found = _open_env(doc.get("env") or {}, doc[KEY], sealer, org_id, "env")
        values += found
    if doc.get("pod"):
        services = []
        for service in doc["pod"]:
            plain = {k: v for k, v in service.items() if k != KEY}
            if service.get(KEY):
                where = f"pod/{service['name']}/env"
                plain["env"], found = _open_env(
                    service.get("env") or {}, service[KEY], sealer, org_id, where
                )
                values += found
            services.append(plain)
        out["pod"] = services
    return out, values


def has_sealed(doc: Mapping[str, Any]) -> bool:
    return bool(doc.get(KEY)) or any(s.get(KEY) for s in doc.get("pod") or ())
