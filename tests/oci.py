"""Real OCI images for tests (docs/containers.md): the CNCF distribution registry
(Debian's ``docker-registry``) on loopback, anonymous or behind htpasswd, and images built
here, as a team builds theirs: a rootfs made into an OCI layout with ``umoci`` and pushed
with ``skopeo``.

- :func:`busybox_layout`: busybox-static and a marker file (a tiny image whose files exist
  nowhere on the host);
- :func:`debian_python_layout`: a Debian minbase with python3, built once by debootstrap
  (from Debian's package mirror) and kept outside the repository
  (``RUNPLANE_TEST_IMAGE_CACHE``, default ``/var/cache/runplane-test-images``);
- :class:`Registry`: a registry process on a free loopback port; :meth:`Registry.push`
  copies a layout to ``<repo>:<tag>`` and answers the manifest digest.

All of it is synchronous (subprocess): fixtures call it before the trio test runs.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TOOLS = ("skopeo", "umoci", "docker-registry")
CACHE = Path(os.environ.get("RUNPLANE_TEST_IMAGE_CACHE", "/var/cache/runplane-test-images"))
BUSYBOX = "/bin/busybox"
#: the applets a busybox image links (enough for shell scripts, ls/cat/id, uname, dmesg, nc)
APPLETS = (
    "sh", "echo", "cat", "ls", "id", "uname", "dmesg", "sleep", "env", "pwd", "test",
    "mkdir", "touch", "rm", "wc", "head", "tr", "nc", "printf", "true", "false", "grep",
    "stat", "date", "hostname", "kill", "ps", "wget", "sed", "cut",
)  # fmt: skip


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None] + (
        [] if Path(BUSYBOX).exists() else ["busybox-static"]
    )


def _run(*argv: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout.decode()


def layout_from_rootfs(
    rootfs: Path,
    layout: Path,
    *,
    env: Mapping[str, str] | None = None,
    cmd: list[str] | None = None,
    entrypoint: list[str] | None = None,
    workdir: str | None = None,
    user: str | None = None,
    arch: str | None = None,
    tag: str = "img",
) -> Path:
    """An OCI layout at ``layout`` (image tag ``tag``) whose one layer is ``rootfs`` and
    whose config has the given Env, Cmd, Entrypoint, WorkingDir, User and architecture."""
    image = f"{layout}:{tag}"
    if not (layout / "index.json").exists():
        _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", image)
    bundle = layout.parent / f".{layout.name}-{tag}-bundle"
    shutil.rmtree(bundle, ignore_errors=True)
    _run("umoci", "unpack", "--rootless", "--image", image, str(bundle))
    (bundle / "rootfs").rmdir()
    _drop_special_files(rootfs)
    shutil.copytree(rootfs, bundle / "rootfs", symlinks=True)
    _run("umoci", "repack", "--image", image, str(bundle))
    shutil.rmtree(bundle, ignore_errors=True)
    args = ["umoci", "config", "--image", image]
    for key, value in (env or {"PATH": "/bin:/usr/bin"}).items():
        args += ["--config.env", f"{key}={value}"]
    for part in cmd or []:
        args += ["--config.cmd", part]
    for part in entrypoint or []:
        args += ["--config.entrypoint", part]
    if workdir:
        args += ["--config.workingdir", workdir]
    if user:
        args += ["--config.user", user]
    if arch:
        args += ["--architecture", arch]
    _run(*args)
    return layout


def _drop_special_files(rootfs: Path) -> None:
    """Remove device nodes, fifos and sockets (debootstrap makes /dev/full, /dev/zero...):
    copied as files they would be read forever, and a runtime gives /dev anyway."""
    for top, dirs, files in os.walk(rootfs):
        for name in files + dirs:
            path = Path(top) / name
            mode = path.lstat().st_mode
            if (
                stat.S_ISCHR(mode)
                or stat.S_ISBLK(mode)
                or stat.S_ISFIFO(mode)
                or stat.S_ISSOCK(mode)
            ):
                path.unlink()


def busybox_rootfs(root: Path, marker: str, files: Mapping[str, str] | None = None) -> Path:
    """A rootfs with busybox-static, its applets in /bin, ``/marker`` holding ``marker``
    and ``files`` (path -> text)."""
    rootfs = root / "rootfs"
    (rootfs / "bin").mkdir(parents=True, exist_ok=True)
    for d in ("tmp", "etc", "work", "streams", "proc", "dev"):
        (rootfs / d).mkdir(exist_ok=True)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in APPLETS:
        link = rootfs / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    (rootfs / "marker").write_text(marker + "\n")
    (rootfs / "etc" / "passwd").write_text(
        "root:x:0:0:root:/:/bin/sh\nrunner:x:1000:1000::/tmp:/bin/sh\n"
    )
    (rootfs / "etc" / "group").write_text("root:x:0:\nrunner:x:1000:\n")
    for path, text in (files or {}).items():
        target = rootfs / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return rootfs


def busybox_layout(root: Path, marker: str = "runplane-image-marker", **config: object) -> Path:
    """An OCI layout under ``root`` of busybox-static plus ``/marker`` (tag ``img``);
    ``config``: Env, Cmd, ... as :func:`layout_from_rootfs` takes them (``files`` too)."""
    files = config.pop("files", None)
    rootfs = busybox_rootfs(root / f"bb-{marker}", marker, files)  # type: ignore[arg-type]
    return layout_from_rootfs(rootfs, root / f"layout-{marker}", **config)  # type: ignore[arg-type]


def debian_python_layout() -> Path:
    """A Debian bookworm minbase with python3 as an OCI layout (tag ``img``), built once
    and kept in :data:`CACHE` (a lock serialises builders)."""
    layout = CACHE / "debian-python"
    if (layout / "index.json").exists() and (CACHE / "debian-python.done").exists():
        return layout
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (CACHE / "debian-python.done").exists():
            return layout
        rootfs = CACHE / "debian-python-rootfs"
        _unmount_under(rootfs)  # an interrupted debootstrap leaves /proc and /sys mounted
        shutil.rmtree(rootfs, ignore_errors=True)
        shutil.rmtree(layout, ignore_errors=True)
        mirror = os.environ.get("RUNPLANE_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
        _run(
            "debootstrap", "--variant=minbase", "--include=python3-minimal",
            "bookworm", str(rootfs), mirror,
        )  # fmt: skip
        _unmount_under(rootfs)
        for junk in (
            "var/cache/apt/archives",
            "var/lib/apt/lists",
            "usr/share/doc",
            "usr/share/man",
        ):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        layout_from_rootfs(
            rootfs,
            layout,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
            cmd=["python3"],
        )
        shutil.rmtree(rootfs, ignore_errors=True)
        (CACHE / "debian-python.done").write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n"))
    return layout


def _unmount_under(root: Path) -> None:
    for sub in ("proc", "sys", "dev/pts", "dev"):
        if (root / sub).is_mount():
            subprocess.run(
                ["umount", "-R", "-l", str(root / sub)], check=False, capture_output=True
            )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def htpasswd_line(user: str, password: str) -> str:
    """An htpasswd line the registry takes (bcrypt, as ``htpasswd -B`` writes)."""
    import bcrypt

    return f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}"


@dataclass
class Registry:
    """A ``docker-registry`` on ``127.0.0.1:<port>``; ``auth`` (user, password) puts it
    behind htpasswd (HTTP Basic on every /v2/ request)."""

    root: Path
    auth: tuple[str, str] | None = None
    port: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Registry:
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or _free_port()
        config = {
            "version": 0.1,
            "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(self.root / "data")},
                        "delete": {"enabled": True}},
            "http": {"addr": self.host},
        }  # fmt: skip
        if self.auth is not None:
            (self.root / "htpasswd").write_text(htpasswd_line(*self.auth) + "\n")
            config["auth"] = {
                "htpasswd": {"realm": "runplane-test", "path": str(self.root / "htpasswd")}
            }
        (self.root / "config.yml").write_text(json.dumps(config))  # JSON is YAML
        log = open(self.root / "registry.log", "ab")  # noqa: SIM115 (the process keeps it)
        self.proc = subprocess.Popen(
            ["docker-registry", "serve", str(self.root / "config.yml")],
            stdout=log,
            stderr=log,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1)
                break
            except urllib.error.HTTPError:
                break  # 401: up, and asking for credentials
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "docker-registry did not start: "
                        + (self.root / "registry.log").read_text(errors="replace")[-2000:]
                    ) from None
                time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _creds(self) -> list[str]:
        return ["--dest-creds", f"{self.auth[0]}:{self.auth[1]}"] if self.auth else []

    def push(self, layout: Path, repo: str, tag: str, *, image_tag: str = "img") -> str:
        """Copy ``layout:image_tag`` to ``<host>/<repo>:<tag>``; the manifest's digest."""
        digest_file = layout.parent / f".{repo.replace('/', '_')}-{tag}.digest"
        _run(
            "skopeo", "copy", "--quiet", "--dest-tls-verify=false", *self._creds(),
            "--digestfile", str(digest_file),
            f"oci:{layout}:{image_tag}", f"docker://{self.host}/{repo}:{tag}",
        )  # fmt: skip
        return digest_file.read_text().strip()

    def manifest_digest(self, repo: str, tag: str) -> str:
        """What ``repo:tag`` points at now (the registry's Docker-Content-Digest)."""
        req = urllib.request.Request(
            f"http://{self.host}/v2/{repo}/manifests/{tag}",
            method="HEAD",
            headers={
                "Accept": "application/vnd.oci.image.manifest.v1+json, "
                "application/vnd.oci.image.index.v1+json, "
                "application/vnd.docker.distribution.manifest.v2+json"
            },
        )
        if self.auth:
            token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(req, timeout=5) as answer:
            return str(answer.headers["Docker-Content-Digest"])

    def blob_path(self, digest: str) -> Path:
        """Where the registry keeps a blob on disk (tests corrupt one to see it refused)."""
        hexd = digest.split(":", 1)[1]
        return self.root / "data/docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"


# -- fixtures (tests/conftest.py imports them, so every test directory has them)


def _need_tools() -> None:
    gone = missing_tools()
    if gone:
        pytest.fail(
            f"OCI tests need {', '.join(gone)} (Debian packages skopeo, umoci, "
            "docker-registry, busybox-static: scripts/test installs them)"
        )


@pytest.fixture
def oci_registry(tmp_path: Path) -> Iterator[Registry]:
    """An anonymous registry on loopback for one test."""
    _need_tools()
    registry = Registry(tmp_path / "registry").start()
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture
def oci_auth_registry(tmp_path: Path) -> Iterator[Registry]:
    """A registry behind htpasswd: user ``puller``, password ``s3cret-pull``."""
    _need_tools()
    registry = Registry(tmp_path / "auth-registry", auth=("puller", "s3cret-pull")).start()
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture
def busybox_image(tmp_path: Path) -> Path:
    """An OCI layout (tag ``img``): busybox-static plus ``/marker`` holding
    ``runplane-image-marker``."""
    _need_tools()
    return busybox_layout(tmp_path / "images")
