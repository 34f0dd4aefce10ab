"""The node's image cache against a real registry on loopback (tests/oci.py): skopeo pulls
by digest, umoci unpacks, the cache keeps one copy per digest, pins what jobs use and
evicts the least recently used under its limit (runplane/agent/images/store.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from runplane.agent.images import pull
from runplane.agent.images.errors import CacheFull, DigestMismatch, ImageError, PullFailed
from runplane.agent.images.layout import node_arch
from runplane.agent.images.store import ImageStore
from runplane.agent.protocol import ImageOrder
from tests.agent.images.helpers import Notes, cache_paths, index_layout, order_for, push_all
from tests.oci import Registry, busybox_layout, debian_python_layout

MB = 1_000_000


def opened(root: Path, limit: int = 100 * MB) -> ImageStore:
    store = ImageStore(root, limit)
    store.open()
    return store


@pytest.fixture
def busybox_order(oci_registry: Registry, busybox_image: Path) -> ImageOrder:
    return order_for(oci_registry, "bb", oci_registry.push(busybox_image, "bb", "v1"))


async def test_pull_unpacks_the_image_with_its_config_and_says_so(
    oci_registry: Registry, tmp_path: Path
) -> None:
    layout = busybox_layout(
        tmp_path / "src",
        "configured",
        env={"PATH": "/bin", "GREETING": "hello there"},
        cmd=["sh", "-c", "echo hi"],
        entrypoint=["/bin/env"],
        workdir="/work",
        user="1000:1000",
    )
    digest = oci_registry.push(layout, "team/app", "v1")
    store = opened(tmp_path / "images")
    notes = Notes()
    order = order_for(oci_registry, "team/app", digest)
    async with store.use(order, notes) as rootfs:
        assert rootfs.digest == digest
        assert (rootfs.path / "marker").read_text() == "configured\n"
        assert (rootfs.path / "bin" / "busybox").stat().st_uid == 0
        config = rootfs.config
        assert config.env == ("PATH=/bin", "GREETING=hello there")
        assert config.cmd == ("sh", "-c", "echo hi")
        assert config.entrypoint == ("/bin/env",)
        assert (config.working_dir, config.user) == ("/work", "1000:1000")
        assert rootfs.path == tmp_path / "images" / "sha256" / digest[7:] / "rootfs"
    assert notes.lines[0] == f"pulling {order.ref} from {order.source}"
    assert notes.having("layer 1/1 sha256:") and notes.having(" MB")
    assert notes.having(f"pulled {order.ref}: 1 layer, ")
    assert notes.having("unpacked in ")
    # only the rootfs and config stay (the OCI layout is removed once unpacked)
    entry = tmp_path / "images" / "sha256" / digest[7:]
    assert sorted(p.name for p in entry.iterdir()) == ["config.json", "entry.json", "rootfs"]
    assert store.digests() == [digest]
    facts = store.facts()
    assert facts.digests == [digest] and facts.limit_bytes == 100 * MB
    assert 0 < facts.free_bytes < 100 * MB


async def test_a_cached_digest_is_not_pulled_again(
    busybox_order: ImageOrder, tmp_path: Path
) -> None:
    store = opened(tmp_path / "images")
    async with store.use(busybox_order, Notes()):
        pass
    notes = Notes()
    async with store.use(busybox_order, notes) as rootfs:
        assert (rootfs.path / "marker").exists()
    assert store.pulls == 1
    assert notes.lines == [f"image {busybox_order.ref} cached on this node"]


async def test_concurrent_uses_of_a_digest_pull_it_once(
    busybox_order: ImageOrder, tmp_path: Path
) -> None:
    store = opened(tmp_path / "images")
    seen: list[Path] = []
    notes = [Notes() for _ in range(3)]

    async def job(i: int) -> None:
        async with store.use(busybox_order, notes[i]) as rootfs:
            seen.append(rootfs.path)
            await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(job, i)
    assert store.pulls == 1
    assert len(set(seen)) == 1 and len(seen) == 3
    assert sum(bool(n.having("waiting for the pull of")) for n in notes) == 2


async def test_eviction_takes_the_least_recently_used_never_a_pinned_one(
    oci_registry: Registry, tmp_path: Path
) -> None:
    orders = [
        order_for(
            oci_registry,
            f"img{i}",
            oci_registry.push(busybox_layout(tmp_path, f"m{i}"), f"img{i}", "v1"),
        )
        for i in range(3)
    ]
    probe = opened(tmp_path / "probe")
    async with probe.use(orders[0], Notes()):
        pass
    one = probe.used_bytes()
    store = opened(tmp_path / "images", limit=one + one // 2)  # room for one image
    digests = [o.ref.rpartition("@")[2] for o in orders]
    async with store.use(orders[0], Notes()):
        pass
    async with store.use(orders[1], Notes()):
        # the first, unused, made room for the second
        assert store.digests() == [digests[1]]
        assert not (tmp_path / "images" / "sha256" / digests[0][7:]).exists()
        async with store.use(orders[2], Notes()):
            # the second is in use: kept, over the limit meanwhile
            assert store.digests() == [digests[2], digests[1]]
            assert (tmp_path / "images" / "sha256" / digests[1][7:] / "rootfs").is_dir()
        # the third is not in use any more, but the second still is: the third goes
        assert store.digests() == [digests[1]]
    assert store.used_bytes() <= store.limit_bytes
    assert cache_paths(tmp_path / "images") == [f"sha256/{digests[1][7:]}"]


async def test_an_image_larger_than_the_whole_cache_fails_clearly(
    busybox_order: ImageOrder, tmp_path: Path
) -> None:
    store = opened(tmp_path / "images", limit=100_000)  # less than the layer itself
    with pytest.raises(CacheFull, match=r"^image cache full: .* more than the whole cache"):
        async with store.use(busybox_order, Notes()):
            pass
    store = opened(tmp_path / "images2", limit=1_500_000)  # the layer fits, unpacked not
    with pytest.raises(CacheFull, match=r"unpacked, more than the whole cache"):
        async with store.use(busybox_order, Notes()):
            pass
    assert cache_paths(tmp_path / "images2") == []


async def test_a_corrupted_blob_is_refused_and_nothing_is_cached(
    oci_registry: Registry, busybox_image: Path, tmp_path: Path
) -> None:
    digest = oci_registry.push(busybox_image, "bb", "v1")
    manifest = json.loads(oci_registry.blob_path(digest).read_bytes())
    layer = oci_registry.blob_path(manifest["layers"][0]["digest"])
    layer.write_bytes(b"not the layer at all" * 1000)
    store = opened(tmp_path / "images")
    notes = Notes()
    with pytest.raises(DigestMismatch, match=r"^layer/manifest digest mismatch: refused"):
        async with store.use(order_for(oci_registry, "bb", digest), notes):
            pass
    assert not notes.having("try 2")  # refused at once, not retried
    assert store.digests() == [] and cache_paths(tmp_path / "images") == []


async def test_a_cancelled_pull_stops_skopeo_and_leaves_nothing(
    busybox_order: ImageOrder, tmp_path: Path
) -> None:
    store = opened(tmp_path / "images")
    with trio.CancelScope() as scope:

        async def note(line: str) -> None:
            if line.startswith("layer "):
                scope.cancel()  # skopeo is copying

        async with store.use(busybox_order, note):
            pass
    assert scope.cancelled_caught
    assert store.digests() == [] and cache_paths(tmp_path / "images") == []
    async with store.use(busybox_order, Notes()) as rootfs:  # and a later use pulls it
        assert (rootfs.path / "marker").exists()


async def test_a_restart_finds_the_cache_and_sweeps_a_crash_s_leftovers(
    oci_registry: Registry, tmp_path: Path
) -> None:
    orders = [
        order_for(
            oci_registry,
            f"img{i}",
            oci_registry.push(busybox_layout(tmp_path, f"r{i}"), f"img{i}", "v1"),
        )
        for i in range(2)
    ]
    store = opened(tmp_path / "images")
    for order in (orders[1], orders[0], orders[1]):
        async with store.use(order, Notes()):
            pass
    before = store.digests()
    root = tmp_path / "images"
    (root / "tmp" / "half-pulled").mkdir()  # a crash mid-pull
    (root / "sha256" / ("0" * 64)).mkdir()  # an entry without its entry.json
    again = opened(root)
    assert again.digests() == before
    assert again.used_bytes() == store.used_bytes()
    assert cache_paths(root) == sorted(f"sha256/{d[7:]}" for d in before)
    notes = Notes()
    async with again.use(orders[0], notes):
        pass
    assert again.pulls == 0 and notes.having("cached on this node")
    assert again.digests() == [before[1], before[0]]


async def test_a_wrong_password_fails_with_the_registry_s_reason_and_is_never_shown(
    oci_auth_registry: Registry,
    busybox_image: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    digest = oci_auth_registry.push(busybox_image, "private/bb", "v1")
    argv_log = tmp_path / "argv.log"
    wrapper = tmp_path / "skopeo"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {argv_log}\nexec skopeo "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setattr(pull, "SKOPEO", str(wrapper))
    monkeypatch.setattr(pull, "RETRY_MIN_SEC", 0.01)
    monkeypatch.setattr(pull, "RETRY_MAX_SEC", 0.02)
    store = opened(tmp_path / "images")
    notes = Notes()
    wrong = "wr0ng-Passw0rd"
    order = order_for(oci_auth_registry, "private/bb", digest, auth=("puller", wrong))
    with pytest.raises(
        PullFailed, match=r"failed after 3 tries: unauthorized: authentication required"
    ) as failed:
        async with store.use(order, notes):
            pass
    assert len(notes.having("try ")) == 2  # retried twice, then failed
    shown = "\n".join(
        [*notes.lines, caplog.text, argv_log.read_text(), str(failed.value), repr(order)]
    )
    assert wrong not in shown and "/proc/self/fd/" in argv_log.read_text()
    assert store.digests() == [] and cache_paths(tmp_path / "images") == []
    right = order_for(oci_auth_registry, "private/bb", digest, auth=("puller", "s3cret-pull"))
    async with store.use(right, Notes()) as rootfs:
        assert (rootfs.path / "marker").read_text() == "runplane-image-marker\n"
    assert "s3cret-pull" not in argv_log.read_text() + caplog.text


async def test_a_waiter_pulls_itself_when_the_pull_it_waited_for_is_cancelled(
    busybox_order: ImageOrder, tmp_path: Path
) -> None:
    store = opened(tmp_path / "images")
    waiting = Notes()
    got: list[Path] = []
    waits = trio.Event()

    async def second_note(line: str) -> None:
        await waiting(line)
        if line.startswith("waiting for the pull of"):
            waits.set()

    async def first() -> None:
        with trio.CancelScope() as scope:

            async def note(line: str) -> None:
                if line.startswith("layer "):  # skopeo copies, the second job waits
                    await waits.wait()
                    scope.cancel()

            async with store.use(busybox_order, note):
                await trio.sleep_forever()

    async def second() -> None:
        async with store.use(busybox_order, second_note) as rootfs:
            got.append(rootfs.path / "marker")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.lowlevel.checkpoint()  # the first started its pull
        nursery.start_soon(second)
    assert store.pulls == 2
    assert waiting.having(f"pulling {busybox_order.ref}")  # in its turn
    assert len(got) == 1 and got[0].read_text() == "runplane-image-marker\n"


async def test_a_multi_architecture_image_pulls_the_node_s_platform(
    oci_registry: Registry, tmp_path: Path
) -> None:
    here = node_arch()
    other = "arm64" if here != "arm64" else "amd64"
    layout = index_layout(
        tmp_path,
        {
            f"linux/{other}": busybox_layout(tmp_path, "for-other", arch=other),
            f"linux/{here}": busybox_layout(tmp_path, "for-here", arch=here),
        },
    )
    digest = push_all(oci_registry, layout, "multi")
    store = opened(tmp_path / "images")
    notes = Notes()
    async with store.use(order_for(oci_registry, "multi", digest), notes) as rootfs:
        assert (rootfs.path / "marker").read_text() == "for-here\n"
        assert rootfs.digest == digest  # cached by the digest the job asked for
    assert notes.having("layer 1/1 sha256:")


async def test_an_image_for_another_architecture_is_refused(
    oci_registry: Registry, tmp_path: Path
) -> None:
    other = "arm64" if node_arch() != "arm64" else "amd64"
    single = busybox_layout(tmp_path, "single-other", arch=other)
    digest = oci_registry.push(single, "other", "v1")
    store = opened(tmp_path / "images")
    with pytest.raises(ImageError, match=rf"is for linux/{other}; this node is linux/"):
        async with store.use(order_for(oci_registry, "other", digest), Notes()):
            pass
    only_other = index_layout(tmp_path / "idx", {f"linux/{other}": single})
    digest = push_all(oci_registry, only_other, "only-other")
    with pytest.raises(ImageError, match=rf"has no linux/\w+ image \(it has: linux/{other}\)"):
        async with store.use(order_for(oci_registry, "only-other", digest), Notes()):
            pass
    assert store.digests() == [] and cache_paths(tmp_path / "images") == []


async def test_a_realistic_image_unpacks_whole(oci_registry: Registry, tmp_path: Path) -> None:
    """Debian minbase with python3 (tests/oci.py builds it once): owners, links and all."""
    digest = oci_registry.push(debian_python_layout(), "debian/python", "bookworm")
    store = opened(tmp_path / "images", limit=2000 * MB)
    notes = Notes()
    async with store.use(order_for(oci_registry, "debian/python", digest), notes) as rootfs:
        python = rootfs.path / "usr" / "bin" / "python3"
        assert python.is_symlink() or python.is_file()
        assert (rootfs.path / "etc" / "debian_version").read_text().startswith("12")
        assert rootfs.config.cmd == ("python3",)
        assert "LANG=C.UTF-8" in rootfs.config.env
        assert (rootfs.path / "usr" / "bin" / "su").stat().st_mode & 0o4000  # setuid kept
    assert 50 * MB < store.used_bytes() < 1000 * MB
    assert notes.having("unpacked in ")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1600 KiB tmpfs (root mounts it): room for the busybox layer, not for it unpacked."""
    where = tmp_path / "small-disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1600k", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


async def test_a_full_disk_says_the_image_cache_is_full(
    busybox_order: ImageOrder, small_disk: Path
) -> None:
    store = opened(small_disk / "images", limit=100 * MB)  # the limit is not what stops it
    with pytest.raises(CacheFull, match=r"^image cache full: no space left on the disk"):
        async with store.use(busybox_order, Notes()):
            pass
    assert store.digests() == [] and cache_paths(small_disk / "images") == []


@pytest.mark.parametrize("failure", ["not found", "unreachable"])
async def test_a_failed_pull_names_the_registry_s_reason(
    oci_registry: Registry,
    busybox_image: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
) -> None:
    monkeypatch.setattr(pull, "RETRY_MIN_SEC", 0.01)
    monkeypatch.setattr(pull, "RETRY_MAX_SEC", 0.02)
    digest = oci_registry.push(busybox_image, "bb", "v1")
    if failure == "not found":
        order = order_for(oci_registry, "nobody/here", digest)
        reason = "manifest unknown"
    else:
        order = order_for(oci_registry, "bb", digest)
        oci_registry.stop()
        reason = "connection refused"
    store = opened(tmp_path / "images")
    notes = Notes()
    with pytest.raises(PullFailed, match=rf"^pulling {order.ref} failed after 3 tries: .*{reason}"):
        async with store.use(order, notes):
            pass
    assert len(notes.having(reason)) == 2  # each retry said why
