"""An ssh server for tests: OpenSSH's ``sshd`` (Debian's openssh-server, which
``scripts/test`` installs) on a loopback port with its own host key and an
``authorized_keys`` file a test adds deploy keys to, as a git host's deploy-key page
does. Git over ssh then reaches the bare repositories on this machine by path."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass
class SshServer:
    port: int
    authorized_keys: Path

    def url(self, repo: Path) -> str:
        return f"ssh://root@127.0.0.1:{self.port}{repo}"

    def authorize(self, public_key: str) -> None:
        with self.authorized_keys.open("a") as fh:
            fh.write(public_key.strip() + "\n")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def sshd(top: Path) -> Iterator[SshServer]:
    """Run sshd for root on 127.0.0.1 (the tests run as root), stopped after."""
    top.mkdir(parents=True, exist_ok=True)
    host_key = top / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    keys = top / "authorized_keys"
    keys.touch(mode=0o600)
    port = _free_port()
    config = top / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {keys}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nStrictModes no\n"
        f"UsePAM no\nPidFile {top / 'sshd.pid'}\nLogLevel ERROR\n"
    )
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # its privilege separation dir
    proc = subprocess.Popen(
        [shutil.which("sshd") or SSHD, "-D", "-e", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=(top / "sshd.log").open("wb"),
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            assert proc.poll() is None, (top / "sshd.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield SshServer(port, keys)
    finally:
        proc.terminate()
        proc.wait(5)
