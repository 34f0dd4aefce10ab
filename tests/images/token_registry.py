"""A docker-registry behind the token flow (``auth: token``, as Docker Hub and GHCR run
theirs), and a small token service: the boundary we do not own (Docker Hub's
auth.docker.io). The service hands a pull token (an ES256 JWT whose ``x5c`` chains to the
registry's root certificate) to whoever presents the right Basic credential, and an
anonymous token (no access) to anybody else. The registry itself is the real one."""

from __future__ import annotations

import base64
import datetime
import functools
import json
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import h11
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from tests.h11_server import answer, read_request
from tests.oci import Registry

SERVICE, ISSUER = "runplane-test-registry", "runplane-test-issuer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenService:
    """Answers ``GET /token?service=&scope=`` with a JWT; ``user``/``password`` unlock pulls."""

    user: str
    password: str
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    port: int = 0
    asked: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "runplane test token issuer")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def token(self, subject: str, access: list[dict[str, object]]) -> str:
        header = {"typ": "JWT", "alg": "ES256",
                  "x5c": [base64.b64encode(self.cert.public_bytes(serialization.Encoding.DER)).decode()]}  # fmt: skip
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": subject, "aud": SERVICE, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": secrets.token_hex(8), "access": access}  # fmt: skip
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self.key.sign(signing.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    async def start(self, nursery: trio.Nursery) -> TokenService:
        serve = functools.partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        self.port = listeners[0].socket.getsockname()[1]
        return self

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        request = await read_request(stream, conn)
        if request is None:
            return
        query = {k: v[0] for k, v in parse_qs(urlsplit(request.target).query).items()}
        self.asked.append({**query, "authorization": request.headers.get("authorization", "")})
        wanted = f"{self.user}:{self.password}".encode()
        basic = "Basic " + base64.b64encode(wanted).decode()
        given = request.headers.get("authorization")
        if given is not None and given != basic:
            problem = {"errors": [{"code": "UNAUTHORIZED", "message": "bad username or password"}]}
            await answer(stream, conn, 401, json.dumps(problem).encode())
            return
        access: list[dict[str, object]] = []
        scope = query.get("scope", "")
        if given is not None and scope.startswith("repository:"):
            _, name, _ = scope.split(":")
            access = [{"type": "repository", "name": name, "actions": ["pull"]}]
        body = json.dumps({"token": self.token(self.user if given else "", access)})
        await answer(stream, conn, 200, body.encode(), [("Content-Type", "application/json")])


def serve_with_token_auth(registry: Registry, tokens: TokenService) -> subprocess.Popen[bytes]:
    """Restart ``registry`` (its data kept, its port too) behind ``tokens``."""
    registry.stop()
    (registry.root / "root.pem").write_bytes(tokens.cert_pem())
    config = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(registry.root / "data")}},
        "http": {"addr": registry.host},
        "auth": {"token": {"realm": f"http://127.0.0.1:{tokens.port}/token", "service": SERVICE,
                           "issuer": ISSUER, "rootcertbundle": str(registry.root / "root.pem")}},
    }  # fmt: skip
    (registry.root / "token.yml").write_text(json.dumps(config))
    log = open(registry.root / "registry.log", "ab")  # noqa: SIM115 (the process keeps it)
    registry.proc = subprocess.Popen(
        ["docker-registry", "serve", str(registry.root / "token.yml")], stdout=log, stderr=log
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"http://{registry.host}/v2/", timeout=1)
            return registry.proc
        except urllib.error.HTTPError:
            return registry.proc  # 401: up, and challenging
        except OSError:
            if registry.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((registry.root / "registry.log").read_text()[-2000:]) from None
            time.sleep(0.05)
