"""Image references read as Docker reads them, and the registry settings."""

from __future__ import annotations

import pytest

from runplane.images.reference import BadReference, parse, registry_key
from runplane.images.routing import Routing
from runplane.settings import SettingsError, load_settings

HEX = "a" * 64


@pytest.mark.parametrize(
    ("text", "name", "tag", "digest"),
    [
        ("busybox", "docker.io/library/busybox", "latest", ""),
        ("busybox:1.36", "docker.io/library/busybox", "1.36", ""),
        ("team/app", "docker.io/team/app", "latest", ""),
        ("index.docker.io/library/python:3.11-slim", "docker.io/library/python", "3.11-slim", ""),
        ("ghcr.io/org/sub/img:v2", "ghcr.io/org/sub/img", "v2", ""),
        ("127.0.0.1:5000/team/bb", "127.0.0.1:5000/team/bb", "latest", ""),
        ("localhost/bb:x", "localhost/bb", "x", ""),
        (f"Registry.Corp:5000/a/b@sha256:{HEX}", "registry.corp:5000/a/b", "", f"sha256:{HEX}"),
        (f"busybox:1@sha256:{HEX}", "docker.io/library/busybox", "1", f"sha256:{HEX}"),
    ],
)
def test_references_normalize_like_docker(text: str, name: str, tag: str, digest: str) -> None:
    ref = parse(text)
    assert (ref.name, ref.tag, ref.digest) == (name, tag, digest)
    assert ref.pinned(f"sha256:{HEX}") == f"{name}@sha256:{HEX}"


@pytest.mark.parametrize(
    "text",
    ["", "Busybox", "busybox:", "a b", "busybox@sha256:abc", "x/-y", "busybox:-tag", "a" * 513],
)
def test_bad_references_are_refused(text: str) -> None:
    with pytest.raises(BadReference):
        parse(text)


def test_registry_keys() -> None:
    assert registry_key("Index.Docker.IO") == "docker.io"
    assert registry_key("127.0.0.1:5000") == "127.0.0.1:5000"
    with pytest.raises(BadReference):
        registry_key("host:99999")
    with pytest.raises(BadReference):
        registry_key("https://ghcr.io")


def test_settings_name_the_setting_when_they_are_wrong() -> None:
    settings = load_settings(
        {
            "RUNPLANE_REGISTRY_MIRRORS": "docker.io=127.0.0.1:5000, GHCR.io=mirror.corp:5000",
            "RUNPLANE_INSECURE_REGISTRIES": "127.0.0.1:5000",
        }
    )
    assert settings.registry_mirrors == {
        "docker.io": "127.0.0.1:5000",
        "ghcr.io": "mirror.corp:5000",
    }
    assert settings.insecure_registries == ("127.0.0.1:5000",)
    assert settings.stack_images == "declared"
    for env, name in (
        ({"RUNPLANE_REGISTRY_MIRRORS": "docker.io"}, "RUNPLANE_REGISTRY_MIRRORS"),
        ({"RUNPLANE_REGISTRY_MIRRORS": "docker.io=a b"}, "RUNPLANE_REGISTRY_MIRRORS"),
        ({"RUNPLANE_INSECURE_REGISTRIES": "http://x"}, "RUNPLANE_INSECURE_REGISTRIES"),
        ({"RUNPLANE_STACK_IMAGES": "always"}, "RUNPLANE_STACK_IMAGES"),
    ):
        with pytest.raises(SettingsError, match=f"^{name}="):
            load_settings(env)


def test_routing_maps_mirrors_and_plain_http() -> None:
    routing = Routing.of({"docker.io": "127.0.0.1:5000"}, ("127.0.0.1:5000",), ())
    assert routing.pull_host("docker.io") == "127.0.0.1:5000"
    assert routing.endpoint("docker.io").origin == "http://127.0.0.1:5000"
    assert routing.endpoint("ghcr.io").origin == "https://ghcr.io"
    assert Routing.of({}, (), ()).endpoint("docker.io").origin == "https://registry-1.docker.io"
    named = routing.endpoint("docker.io").allow
    assert named.address_allowed("127.0.0.1") and not routing.endpoint("ghcr.io").allow.networks
