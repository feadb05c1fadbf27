"""HTTPS served by Foyer itself from certificate files (openssl makes a CA and certificates for 127.0.0.1), with curl
and Python's ssl: TLS 1.2+, h2 or HTTP/1.1 by ALPN, HSTS and Secure cookies, a renewal picked up without a restart while a
connection made before it goes on, a broken file logged and the last good certificate kept, and the plain-HTTP port's
308 to https://."""
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from conftest import DEMO_EMAIL, DEMO_PASSWORD, REPO, foyer_binary, free_port


def openssl(*arguments, cwd):
    subprocess.run(["openssl", *arguments], cwd=cwd, check=True, capture_output=True, timeout=60)


def certificate_for_localhost(workdir, name: str):
    """A certificate for 127.0.0.1 and localhost signed by the test CA in `workdir` (made on first use)."""
    if not (workdir / "ca.pem").exists():
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
                "-out", "ca.pem", "-days", "2", "-subj", "/CN=Foyer test CA", cwd=workdir)
    (workdir / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}", cwd=workdir)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=workdir)
    return workdir / f"{name}.pem", workdir / f"{name}.key"


class HTTPSServer:
    """Foyer serving HTTPS on `port` from copies of the first certificate, and plain HTTP on `plain_port`."""

    def __init__(self, workdir, extra_env=None):
        self.port, self.plain_port = free_port(), free_port()
        (workdir / "served").mkdir()
        self.certificate, self.key = workdir / "served/cert.pem", workdir / "served/key.pem"
        first = certificate_for_localhost(workdir, "first")
        shutil.copy(first[0], self.certificate)
        shutil.copy(first[1], self.key)
        self.ca = workdir / "ca.pem"
        self.url = f"https://127.0.0.1:{self.port}"
        self.log_path = workdir / "server.log"
        env = dict(os.environ, FOYER_DEMO_EMAIL=DEMO_EMAIL, FOYER_DEMO_PASSWORD=DEMO_PASSWORD, FOYER_DRAIN_DELAY="0", FOYER_SHUTDOWN_GRACE="1")
        env.update(extra_env or {})
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen([
                foyer_binary(), "serve", "--port", str(self.port), "--database", str(workdir / "foyer.sqlite"), "--root", str(REPO),
                "--tls-certificate", str(self.certificate), "--tls-key", str(self.key), "--http-port", str(self.plain_port),
            ], env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while self.curl("/healthz").returncode != 0:
            assert self.process.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, "HTTPS did not answer within 30 s: " + self.log_path.read_text()
            time.sleep(0.1)

    def curl(self, path: str, *arguments) -> subprocess.CompletedProcess:
        return subprocess.run(["curl", "-sS", "-f", "--cacert", str(self.ca), *arguments, self.url + path],
                              capture_output=True, text=True, timeout=30)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=15)


@pytest.fixture
def https(tmp_path):
    server = HTTPSServer(tmp_path)
    yield server
    server.stop()


def served_name(port: int, ca) -> str:
    """The CN of the certificate a new connection is served."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return dict(entry[0] for entry in tls.getpeercert()["subject"])["commonName"]


def test_https_with_curl_http1_tls12_hsts_and_secure_cookies(https):
    answer = https.curl("/up", "--http1.1", "-D", "-", "-o", "/dev/null")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.startswith("HTTP/1.1 200")
    assert "strict-transport-security: max-age=31536000" in answer.stdout.lower()
    # ALPN offers h2 and HTTP/1.1: curl --http2 gets h2, with the same headers.
    negotiated = https.curl("/up", "--http2", "-v", "-D", "-", "-o", "/dev/null")
    assert negotiated.returncode == 0 and "ALPN: server accepted h2" in negotiated.stderr, negotiated.stderr
    assert negotiated.stdout.startswith("HTTP/2 200") and "strict-transport-security: max-age=31536000" in negotiated.stdout, negotiated.stdout
    assert https.curl("/up", "--tlsv1.2", "--tls-max", "1.2").returncode == 0
    assert https.curl("/up", "--tlsv1.1", "--tls-max", "1.1").returncode != 0, "TLS 1.1 is refused"
    signed_in = https.curl("/api/v1/sessions", "-D", "-", "-o", "/dev/null", "-H", "Content-Type: application/json",
                           "--data", json.dumps({"email": DEMO_EMAIL, "password": DEMO_PASSWORD}))
    assert signed_in.returncode == 0, signed_in.stderr
    cookie = next(line for line in signed_in.stdout.splitlines() if line.lower().startswith("set-cookie:"))
    assert "; secure" in cookie.lower(), cookie


def test_the_plain_port_redirects_to_https_with_308(https):
    answer = subprocess.run(["curl", "-sS", "-D", "-", "-o", "/dev/null", "-X", "POST",
                             f"http://127.0.0.1:{https.plain_port}/posts?page=2"], capture_output=True, text=True, timeout=30)
    assert answer.stdout.startswith("HTTP/1.1 308"), answer.stdout
    assert f"location: https://127.0.0.1:{https.port}/posts?page=2" in answer.stdout.lower(), answer.stdout
    followed = subprocess.run(["curl", "-sS", "-f", "-L", "--cacert", str(https.ca), f"http://localhost:{https.plain_port}/up"],
                              capture_output=True, text=True, timeout=30)
    assert followed.stdout == "OK", followed.stderr


def up(connection) -> bytes:
    """GET /up on a kept connection: the whole answer (its body is `OK`)."""
    connection.sendall(b"GET /up HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = b""
    while not answer.endswith(b"\r\n\r\nOK"):
        chunk = connection.recv(4096)
        assert chunk, answer
        answer += chunk
    return answer


def test_a_renewed_certificate_is_served_to_new_connections_while_an_old_one_goes_on(https, tmp_path):
    assert served_name(https.port, https.ca) == "first"
    context = ssl.create_default_context(cafile=str(https.ca))
    kept = context.wrap_socket(socket.create_connection(("127.0.0.1", https.port), timeout=10), server_hostname="127.0.0.1")
    try:
        assert up(kept).startswith(b"HTTP/1.1 200")

        # A broken file (a renewal half written): logged, and the last good certificate goes on being served.
        https.certificate.write_text("not a certificate")
        deadline = time.monotonic() + 60
        while "do not load" not in https.log_path.read_text():
            assert time.monotonic() < deadline, "the broken file was not logged within a minute"
            time.sleep(0.2)
        assert served_name(https.port, https.ca) == "first"

        second = certificate_for_localhost(tmp_path, "second")
        shutil.copy(second[1], https.key)
        shutil.copy(second[0], https.certificate)
        deadline = time.monotonic() + 60
        while served_name(https.port, https.ca) != "second":
            assert time.monotonic() < deadline, "the renewed certificate was not served within a minute"
            time.sleep(0.2)
        # The connection made before the renewal goes on, with the certificate it was given.
        assert up(kept).startswith(b"HTTP/1.1 200")
        assert dict(entry[0] for entry in kept.getpeercert()["subject"])["commonName"] == "first"
    finally:
        kept.close()


def test_a_certificate_that_does_not_load_stops_the_start_with_a_reason(tmp_path):
    (tmp_path / "cert.pem").write_text("garbage")
    (tmp_path / "key.pem").write_text("garbage")
    started = subprocess.run([foyer_binary(), "serve", "--port", str(free_port()), "--database", str(tmp_path / "db.sqlite"), "--root", str(REPO),
                              "--tls-certificate", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")],
                             capture_output=True, text=True, timeout=60)
    assert started.returncode != 0
    assert "--tls-certificate" in started.stderr and "no PEM certificate" in started.stderr, started.stderr
    lonely = subprocess.run([foyer_binary(), "serve", "--database", ":memory:", "--tls-certificate", str(tmp_path / "cert.pem")],
                            capture_output=True, text=True, timeout=60)
    assert lonely.returncode != 0 and "--tls-key" in lonely.stderr, lonely.stderr
