"""The test images themselves (tests/oci.py): built, pushed and read back for real, so a
failure in a container test is not the fixtures'."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.oci import Registry, busybox_layout


def test_a_pushed_image_is_its_digest(oci_registry: Registry, busybox_image: Path) -> None:
    digest = oci_registry.push(busybox_image, "team/bb", "v1")
    assert digest.startswith("sha256:") and len(digest) == 71
    assert oci_registry.manifest_digest("team/bb", "v1") == digest
    config = json.loads(
        subprocess.run(
            ["skopeo", "inspect", "--tls-verify=false", "--config",
             f"docker://{oci_registry.host}/team/bb@{digest}"],
            capture_output=True, check=True,
        ).stdout
    )  # fmt: skip
    assert config["config"]["Env"] == ["PATH=/bin:/usr/bin"]


def test_a_moved_tag_points_at_another_digest(oci_registry: Registry, tmp_path: Path) -> None:
    first = oci_registry.push(busybox_layout(tmp_path, "one"), "team/bb", "latest")
    second = oci_registry.push(busybox_layout(tmp_path, "two"), "team/bb", "latest")
    assert first != second
    assert oci_registry.manifest_digest("team/bb", "latest") == second


def test_the_auth_registry_refuses_anonymous_pushes(
    oci_auth_registry: Registry, busybox_image: Path
) -> None:
    assert oci_auth_registry.push(busybox_image, "private/bb", "v1").startswith("sha256:")
    anonymous = Registry(oci_auth_registry.root, port=oci_auth_registry.port)
    try:
        anonymous.push(busybox_image, "private/bb", "v2")
    except RuntimeError as exc:
        assert "unauthorized" in str(exc).lower() or "authentication" in str(exc).lower()
    else:
        raise AssertionError("an anonymous push to the htpasswd registry went through")
