"""Secret-looking plain env values sealed at rest (runplane/sealed_env.py)."""

from __future__ import annotations

import pytest

from runplane import sealed_env
from runplane.sealing import Sealer, SealError

SEALER = Sealer(b"k" * 32)


def test_secret_looking_plain_values_are_sealed_and_open_again() -> None:
    spec = {
        "stack": "shell",
        "env": {
            "HF_TOKEN": "hf_abc123",
            "DB_PASSWORD": "hunter22",
            "GH_TOKEN": "${secrets.GH}",  # a reference stays as it is
            "EMPTY_SECRET": "",
            "EPOCHS": "3",
        },
    }
    stored = sealed_env.sealed_doc(spec, lambda: SEALER, "org_a")
    assert stored["env"] == {
        "HF_TOKEN": sealed_env.MARK,
        "DB_PASSWORD": sealed_env.MARK,
        "GH_TOKEN": "${secrets.GH}",
        "EMPTY_SECRET": "",
        "EPOCHS": "3",
    }
    assert set(stored[sealed_env.KEY]) == {"HF_TOKEN", "DB_PASSWORD"}
    assert "hf_abc123" not in str(stored) and "hunter22" not in str(stored)
    assert spec["env"]["HF_TOKEN"] == "hf_abc123"  # the caller's spec is not changed
    assert sealed_env.has_sealed(stored)

    opened, values = sealed_env.opened_doc(stored, lambda: SEALER, "org_a")
    assert opened == spec and sorted(values) == ["hf_abc123", "hunter22"]
    # sealed again (a rerun): new ciphertexts, the same values
    again = sealed_env.sealed_doc(opened, lambda: SEALER, "org_a")
    assert again[sealed_env.KEY]["HF_TOKEN"] != stored[sealed_env.KEY]["HF_TOKEN"]
    assert sealed_env.opened_doc(again, lambda: SEALER, "org_a")[0] == spec


def test_a_spec_without_secret_looking_values_is_stored_as_it_is() -> None:
    spec = {"stack": "shell", "env": {"EPOCHS": "3"}}
    assert sealed_env.sealed_doc(spec, lambda: SEALER, "org_a") == spec
    assert not sealed_env.has_sealed(spec)
    assert sealed_env.opened_doc(spec, lambda: SEALER, "org_a") == (spec, [])


def test_pod_services_are_sealed_each_under_its_own_env() -> None:
    spec = {
        "env": {},
        "pod": [
            {"name": "web", "env": {"SESSION_SECRET": "s3cret!", "PORT": "80"}},
            {"name": "db", "env": {"PORT": "5432"}},
        ],
    }
    stored = sealed_env.sealed_doc(spec, lambda: SEALER, "org_a")
    assert stored["pod"][0]["env"] == {"SESSION_SECRET": sealed_env.MARK, "PORT": "80"}
    assert stored["pod"][1] == spec["pod"][1]
    assert sealed_env.has_sealed(stored)
    opened, values = sealed_env.opened_doc(stored, lambda: SEALER, "org_a")
    assert opened == spec and values == ["s3cret!"]


def test_a_sealed_value_does_not_open_for_another_org() -> None:
    stored = sealed_env.sealed_doc({"env": {"API_KEY": "v"}}, lambda: SEALER, "org_a")
    with pytest.raises(SealError):
        sealed_env.opened_doc(stored, lambda: SEALER, "org_b")
