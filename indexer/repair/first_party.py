"""The fake Messages API as api.anthropic.com: Claude Code as a first-party client.

Some of what Claude Code sends depends on whether it takes the API for
Anthropic's own (2.1.332: ``diagnostics.previous_message_id``, the
cache-diagnosis beta), which it decides from the host of its base URL, not
from anything a fake on loopback can answer. ``FirstPartyProxy`` is an HTTPS
proxy on 127.0.0.1 for the CLI's ``HTTPS_PROXY``: a ``CONNECT`` to
``api.anthropic.com:443`` (or claude.googleapis.com, Claude Platform on
Google Cloud) is answered by TLS with a certificate for that host,
signed by a throwaway CA the CLI is told to trust (``NODE_EXTRA_CA_CERTS``),
and the decrypted HTTP goes to the fake API's loopback port. Any other host is
refused (403): nothing reaches the network. The CA and its key live in a
temporary folder for the proxy's lifetime. Needs the ``openssl`` command.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
from pathlib import Path

FIRST_PARTY_HOST = "api.anthropic.com"
# Claude Platform on Google Cloud's default host: 2.1.332 takes it for
# Anthropic's own too when no ANTHROPIC_GOOGLE_CLOUD_BASE_URL is set.
GOOGLE_CLOUD_HOST = "claude.googleapis.com"


class NoOpenSSL(Exception):
    """The openssl command is not there to make the throwaway certificates."""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(folder: Path, hosts: tuple = (FIRST_PARTY_HOST,)) -> tuple[Path, Path, Path]:
    """A CA and a certificate for ``hosts`` signed by it, in ``folder``:
    (ca.pem, host.pem, host.key)."""
    if shutil.which("openssl") is None:
        raise NoOpenSSL("no openssl command")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=session-index oracle CA", "-keyout", "ca.key", "-out", "ca.pem",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={hosts[0]}",
             "-keyout", "host.key", "-out", "host.csr", cwd=folder)
    (folder / "host.ext").write_text(
        "subjectAltName=" + ",".join(f"DNS:{h}" for h in hosts) + "\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "host.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "host.ext", "-out", "host.pem",
             cwd=folder)
    return folder / "ca.pem", folder / "host.pem", folder / "host.key"


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class FirstPartyProxy:
    """An HTTPS proxy on 127.0.0.1 that answers for ``hosts`` (api.anthropic.com
    and claude.googleapis.com) with the server on ``upstream_port`` (a
    FakeMessagesAPI) and refuses every other host. ``env()``: what to give the
    CLI (HTTPS_PROXY, NODE_EXTRA_CA_CERTS; leave ANTHROPIC_BASE_URL unset).
    ``connects`` lists the hosts asked for."""

    def __init__(self, upstream_port: int, hosts: tuple = (FIRST_PARTY_HOST, GOOGLE_CLOUD_HOST)):
        self.upstream_port = upstream_port
        self.hosts = hosts
        self.connects: list[str] = []
        self._tmp = tempfile.TemporaryDirectory(prefix="session-index-first-party-")
        self.ca, cert, key = make_certificates(Path(self._tmp.name), hosts)
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(cert, key)
        self._tls.set_alpn_protocols(["http/1.1"])
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._closed = False

    def env(self) -> dict[str, str]:
        url = f"http://127.0.0.1:{self.port}"
        return {"HTTPS_PROXY": url, "https_proxy": url, "HTTP_PROXY": url,
                "http_proxy": url, "NODE_EXTRA_CA_CERTS": str(self.ca)}

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._closed = True
        self._listener.close()
        self._tmp.cleanup()

    def _serve(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = client.recv(4096)
                if not chunk:
                    client.close()
                    return
                head += chunk
            method, target = (head.split(b"\r\n", 1)[0].split(b" ") + [b"", b""])[:2]
            host = target.decode("latin-1").rsplit(":", 1)[0]
            self.connects.append(host)
            if method != b"CONNECT" or host not in self.hosts:
                client.sendall(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                client.close()
                return
            client.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            tls = self._tls.wrap_socket(client, server_side=True)
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except (OSError, ssl.SSLError):
            client.close()
            return
        threading.Thread(target=_pipe, args=(upstream, tls), daemon=True).start()
        _pipe(tls, upstream)
