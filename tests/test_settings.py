"""Settings: every RUNPLANE_* value parsed, and a bad one named in one clear line."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from runplane.settings import AREAS, SettingsError, ensure_secret_key, load_settings


def test_defaults_make_serve_work_alone() -> None:
    s = load_settings({})
    assert s.data_dir == Path(".runplane")
    assert s.database_url is None
    assert s.auth == "off"
    assert s.admin_token is None
    assert (s.max_cpu, s.max_ram, s.max_gpu, s.max_timeout_sec) == (128, 1024, 16, 604800)
    assert (s.max_concurrent_org, s.max_concurrent_user) == (100, 0)
    assert s.max_upload_mb == 512
    assert s.session_idle_ttl_sec == 300
    assert s.disable == frozenset()
    assert s.egress_allow == ()
    assert s.stacks_dir is None
    assert s.local_agent is True
    assert (s.preemptible_default, s.preempt_grace_sec, s.max_preempt_grace_sec) == (False, 30, 300)
    assert s.cross_org_preemption_tiers == ()
    opened = load_settings({"RUNPLANE_CROSS_ORG_PREEMPTION_TIERS": "community, partner"})
    assert opened.cross_org_preemption_tiers == ("community", "partner")


def test_every_setting_is_read(tmp_path: Path) -> None:
    env = {
        "RUNPLANE_DATA_DIR": str(tmp_path / "d"),
        "RUNPLANE_DATABASE_URL": "postgresql://u@h/db",
        "RUNPLANE_AUTH": "required",
        "RUNPLANE_ADMIN_TOKEN": "a" * 20,
        "RUNPLANE_SECRET_KEY": "ab" * 32,
        "RUNPLANE_PUBLIC_URL": "https://rp.example.com/",
        "RUNPLANE_MAX_CPU": "64",
        "RUNPLANE_MAX_RAM": "256",
        "RUNPLANE_MAX_GPU": "0",
        "RUNPLANE_MAX_TIMEOUT_SEC": "3600",
        "RUNPLANE_MAX_CONCURRENT_ORG": "7",
        "RUNPLANE_MAX_CONCURRENT_USER": "3",
        "RUNPLANE_MAX_UPLOAD_MB": "5",
        "RUNPLANE_SESSION_IDLE_TTL_SEC": "60",
        "RUNPLANE_DISABLE": "streams, git",
        "RUNPLANE_EGRESS_ALLOW": "10.0.0.0/8,hooks.internal",
        "RUNPLANE_STACKS_DIR": str(tmp_path),
        "RUNPLANE_LOCAL_AGENT": "0",
        "RUNPLANE_HA": "1",
        "RUNPLANE_HA_LEASE_SEC": "5",
        "RUNPLANE_HA_ADVERTISE_URL": "http://10.0.0.11:8080/",
    }
    s = load_settings(env)
    assert s.data_dir == tmp_path / "d"
    assert s.database_url == "postgresql://u@h/db"
    assert s.auth == "required"
    assert s.admin_token is not None and s.admin_token.get_secret_value() == "a" * 20
    assert s.secret_key_bytes() == bytes.fromhex("ab" * 32)
    assert s.public_url == "https://rp.example.com"
    assert (s.max_cpu, s.max_ram, s.max_gpu, s.max_timeout_sec) == (64, 256, 0, 3600)
    assert (s.max_concurrent_org, s.max_concurrent_user) == (7, 3)
    assert s.max_upload_mb == 5 and s.session_idle_ttl_sec == 60
    assert s.disable == frozenset({"streams", "git"})
    assert not s.area_enabled("streams") and s.area_enabled("webhooks")
    assert s.egress_allow == ("10.0.0.0/8", "hooks.internal")
    assert s.stacks_dir == tmp_path
    assert s.local_agent is False
    assert (s.ha, s.ha_lease_sec, s.ha_advertise_url) == (True, 5.0, "http://10.0.0.11:8080")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"RUNPLANE_AUTH": "maybe"},
            "RUNPLANE_AUTH='maybe' is not valid: accepted: off, shadow, required",
        ),
        (
            {"RUNPLANE_MAX_CPU": "lots"},
            "RUNPLANE_MAX_CPU='lots' is not valid: accepted: an integer",
        ),
        (
            {"RUNPLANE_MAX_RAM": "0"},
            "RUNPLANE_MAX_RAM='0' is not valid: accepted: an integer greater than or equal to 1",
        ),
        (
            {"RUNPLANE_LOCAL_AGENT": "perhaps"},
            "RUNPLANE_LOCAL_AGENT='perhaps' is not valid: accepted: 1, 0, true, false, yes, no",
        ),
        (
            {"RUNPLANE_DISABLE": "streams,bogus"},
            "RUNPLANE_DISABLE='streams,bogus' is not valid: unknown area 'bogus'; accepted: "
            + ", ".join(AREAS),
        ),
        (
            {"RUNPLANE_DATABASE_URL": "mysql://x"},
            "RUNPLANE_DATABASE_URL='mysql://x' is not valid: accepted: unset (embedded SQLite), 'memory', or 'postgresql://...'",
        ),
        (
            {"RUNPLANE_EGRESS_ALLOW": "10.0.0.0/33"},
            "RUNPLANE_EGRESS_ALLOW='10.0.0.0/33' is not valid: '10.0.0.0/33' is not a valid CIDR; accepted: hosts or CIDRs, comma-separated",
        ),
        (
            {"RUNPLANE_PUBLIC_URL": "ftp://x"},
            "RUNPLANE_PUBLIC_URL='ftp://x' is not valid: accepted: an origin such as 'https://runplane.example.com'",
        ),
        (
            {"RUNPLANE_HA": "1"},
            "RUNPLANE_HA='1' is not valid: accepted: 1 only with "
            "RUNPLANE_DATABASE_URL=postgresql://... (the replicas share that database)",
        ),
        (
            {"RUNPLANE_HA": "1", "RUNPLANE_DATABASE_URL": "postgresql://u@h/db"},
            "RUNPLANE_HA='1' is not valid: accepted: 1 only with RUNPLANE_LOCAL_AGENT=0 (an "
            "in-process agent would die with its replica): run `runplane agent --server "
            "URL,URL` on each node",
        ),
        (
            {"RUNPLANE_HA_LEASE_SEC": "0.5"},
            "RUNPLANE_HA_LEASE_SEC='0.5' is not valid: accepted: a number greater than or equal to 1",
        ),
        (
            {"RUNPLANE_CROSS_ORG_PREEMPTION_TIERS": "community,gold"},
            "RUNPLANE_CROSS_ORG_PREEMPTION_TIERS='community,gold' is not valid: unknown tier "
            "'gold'; accepted: community, partner, trusted",
        ),
        (
            {"RUNPLANE_STACKS_DIR": "/no/such/dir"},
            "RUNPLANE_STACKS_DIR='/no/such/dir' is not valid: '/no/such/dir' is not a directory; accepted: a directory of stack manifests",
        ),
    ],
)
def test_bad_value_is_one_line_naming_setting(env: dict[str, str], expected: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(env)
    assert str(info.value) == expected
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["RUNPLANE_SECRET_KEY", "RUNPLANE_ADMIN_TOKEN"])
def test_bad_secret_is_never_echoed(name: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({name: "short-secret"})
    assert "short-secret" not in str(info.value)
    assert str(info.value).startswith(f"{name}=(secret) is not valid")


def test_empty_values_mean_unset() -> None:
    s = load_settings({"RUNPLANE_DATABASE_URL": "", "RUNPLANE_ADMIN_TOKEN": " "})
    assert s.database_url is None and s.admin_token is None


def test_secret_key_generated_once_with_mode_0600(tmp_path: Path) -> None:
    s = load_settings({"RUNPLANE_DATA_DIR": str(tmp_path / "data")})
    first = ensure_secret_key(s)
    path = tmp_path / "data" / "secret.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first.secret_key_bytes()) == 32
    again = ensure_secret_key(load_settings({"RUNPLANE_DATA_DIR": str(tmp_path / "data")}))
    assert again.secret_key_bytes() == first.secret_key_bytes()


def test_configured_secret_key_is_not_written(tmp_path: Path) -> None:
    s = ensure_secret_key(
        load_settings({"RUNPLANE_DATA_DIR": str(tmp_path), "RUNPLANE_SECRET_KEY": "cd" * 32})
    )
    assert s.secret_key_bytes() == bytes.fromhex("cd" * 32)
    assert not (tmp_path / "secret.key").exists()


def test_world_readable_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    path.write_text("ef" * 32)
    os.chmod(path, 0o644)
    with pytest.raises(SettingsError, match="chmod 600"):
        ensure_secret_key(load_settings({"RUNPLANE_DATA_DIR": str(tmp_path)}))
