"""Certificates Foyer gets itself from an ACME server: Pebble (Let's Encrypt's test server, Debian's `pebble`), with
`pebble-challtestsrv` as its DNS (every name is 127.0.0.1), proving `foyer.test` over HTTP-01 on Foyer's plain port.
Foyer starts with no certificate, serves one Pebble's CA issued, renews it (Pebble issues them for a few seconds
here), keeps it across a restart; two instances on one PostgreSQL order once and serve the same one."""
import json
import os
import signal
import socket
import ssl
import subprocess
import urllib.request

from cryptography import x509

from conftest import DEMO_EMAIL, DEMO_PASSWORD, REPO, foyer_binary, free_port, wait_until
from test_https import certificate_for_localhost
from test_instances import fresh_database

DOMAIN = "foyer.test"

class Pebble:
    """Pebble and its DNS, for names proven on `http_port`; certificates valid for `validity` seconds."""

    def __init__(self, workdir, http_port: int, validity: int):
        certificate, key = certificate_for_localhost(workdir, "pebble")
        self.ca = workdir / "ca.pem"
        self.port, self.management, dns = free_port(), free_port(), free_port()
        (workdir / "pebble.json").write_text(json.dumps({"pebble": {
            "listenAddress": f"127.0.0.1:{self.port}", "managementListenAddress": f"127.0.0.1:{self.management}",
            "certificate": str(certificate), "privateKey": str(key), "httpPort": http_port, "tlsPort": free_port(),
            "ocspResponderURL": "", "externalAccountBindingRequired": False, "certificateValidityPeriod": validity,
        }}))
        self.log = open(workdir / "pebble.log", "w")
        self.dns = subprocess.Popen(
            ["pebble-challtestsrv", "-dns01", f"127.0.0.1:{dns}", "-http01", "", "-https01", "", "-tlsalpn01", "",
             "-management", f"127.0.0.1:{free_port()}", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        # Pebble's validation waits up to 15 s at random unless told not to; it still rejects 5% of nonces, which
        # Foyer must send again.
        self.process = subprocess.Popen(
            ["pebble", "-config", str(workdir / "pebble.json"), "-dnsserver", f"127.0.0.1:{dns}"],
            env=dict(os.environ, PEBBLE_VA_NOSLEEP="1"), stdout=self.log, stderr=subprocess.STDOUT,
        )
        self.directory = f"https://127.0.0.1:{self.port}/dir"
        context = ssl.create_default_context(cafile=str(self.ca))
        wait_until(lambda: self._answers(context), seconds=20, what="Pebble's directory")
        self.root = workdir / "pebble-root.pem"
        with urllib.request.urlopen(f"https://127.0.0.1:{self.management}/roots/0", context=context, timeout=10) as response:
            self.root.write_bytes(response.read())

    def _answers(self, context) -> bool:
        try:
            with urllib.request.urlopen(self.directory, context=context, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def start_afresh(self):
        """Pebble again on the same ports, knowing nothing: no account, no order."""
        self.process.terminate()
        self.process.wait(timeout=10)
        self.process = subprocess.Popen(self.process.args, env=dict(os.environ, PEBBLE_VA_NOSLEEP="1"), stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: self._answers(ssl.create_default_context(cafile=str(self.ca))), seconds=20, what="Pebble's directory again")

    def stop(self):
        for process in (self.process, self.dns):
            process.terminate()
            process.wait(timeout=10)
        self.log.close()


class ACMEFoyer:
    """Foyer getting its certificate from Pebble: HTTPS on `port`, HTTP-01 on `plain_port`."""

    def __init__(self, workdir, pebble: Pebble, plain_port: int, database: str, name: str = "foyer"):
        self.port, self.plain_port = free_port(), plain_port
        self.log_path = workdir / f"{name}.log"
        self.log = open(self.log_path, "w")
        env = dict(os.environ, FOYER_DEMO_EMAIL=DEMO_EMAIL, FOYER_DEMO_PASSWORD=DEMO_PASSWORD, FOYER_DRAIN_DELAY="0", FOYER_SHUTDOWN_GRACE="1")
        self.process = subprocess.Popen([
            foyer_binary(), "serve", "--port", str(self.port), "--http-port", str(plain_port), "--database", database, "--root", str(REPO),
            "--acme-domain", DOMAIN, "--acme-email", "ops@foyer.test", "--acme-directory", pebble.directory,
            "--acme-ca-certificate", str(pebble.ca),
        ], env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def served(self) -> x509.Certificate | None:
        """The certificate a new connection for foyer.test gets (not checked), or None while nothing listens."""
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw, context.wrap_socket(raw, server_hostname=DOMAIN) as tls:
                return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))
        except OSError:
            return None

    def issued_by_pebble(self) -> x509.Certificate | None:
        served = self.served()
        return served if served is not None and served.issuer != served.subject else None

    def curl(self, root, path: str = "/up") -> subprocess.CompletedProcess:
        """curl to https://foyer.test, trusting only Pebble's root: the certificate must chain to it and name foyer.test."""
        return subprocess.run(["curl", "-sS", "-f", "--resolve", f"{DOMAIN}:{self.port}:127.0.0.1", "--cacert", str(root),
                               f"https://{DOMAIN}:{self.port}{path}"], capture_output=True, text=True, timeout=30)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=15)
        self.log.close()

    def orders(self) -> int:
        return self.log_path.read_text().count("Ordering a certificate")

    def issued(self) -> int:
        return self.log_path.read_text().count("Certificate issued")

    def failed_orders(self) -> int:
        return self.log_path.read_text().count("The ACME order failed")


def test_a_certificate_is_ordered_served_renewed_and_kept_across_a_restart(tmp_path):
    plain_port = free_port()
    pebble = Pebble(tmp_path, plain_port, validity=30)
    database = str(tmp_path / "foyer.sqlite")
    foyer = ACMEFoyer(tmp_path, pebble, plain_port, database)
    try:
        # A self-signed certificate stands in until Pebble has issued one.
        wait_until(lambda: foyer.served() is not None, seconds=30, what="Foyer's HTTPS")
        first = wait_until(foyer.issued_by_pebble, seconds=60, what="a certificate issued by Pebble")
        assert DOMAIN in [name.value for name in first.extensions.get_extension_for_class(x509.SubjectAlternativeName).value]
        answered = foyer.curl(pebble.root)
        assert answered.returncode == 0 and answered.stdout == "OK", answered.stderr
        # The plain port: a challenge nobody asked for is 404; everything else goes to https://.
        missing = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{plain_port}/.well-known/acme-challenge/nope"],
                                 capture_output=True, text=True, timeout=10)
        assert missing.stdout == "404"
        redirected = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "-H", f"Host: {DOMAIN}",
                                     f"http://127.0.0.1:{plain_port}/posts"], capture_output=True, text=True, timeout=10)
        assert redirected.stdout == f"308 https://{DOMAIN}:{foyer.port}/posts", redirected.stdout

        # Valid for 30 s: renewed with a third of that left, and served without a restart.
        renewed = wait_until(lambda: (c := foyer.issued_by_pebble()) is not None and c.serial_number != first.serial_number and c,
                             seconds=45, what="a renewed certificate")
        assert renewed.not_valid_after_utc > first.not_valid_after_utc
        assert foyer.orders() == 2
        foyer.stop()

        # Restarted on the same database: the kept certificate is served at once, nothing ordered.
        foyer = ACMEFoyer(tmp_path, pebble, plain_port, database, name="foyer-again")
        kept = wait_until(foyer.served, seconds=30, what="Foyer's HTTPS after the restart")
        if kept.serial_number == renewed.serial_number:
            assert foyer.orders() == 0
        else:  # the kept one was already due again (30 s certificates): then it was renewed, once
            assert foyer.orders() == 1
    finally:
        foyer.stop()
        pebble.stop()


def test_a_failed_order_is_logged_and_retried_while_the_plain_port_answers(tmp_path):
    """The CA cannot reach the plain port (it points Pebble elsewhere): the order fails, is logged with what Pebble
    said, and is tried again; HTTPS goes on with the stand-in meanwhile."""
    plain_port = free_port()
    pebble = Pebble(tmp_path, free_port(), validity=300)
    foyer = ACMEFoyer(tmp_path, pebble, plain_port, str(tmp_path / "foyer.sqlite"))
    try:
        wait_until(lambda: "The ACME order failed" in foyer.log_path.read_text(), seconds=60, what="the failed order logged")
        assert "invalid" in foyer.log_path.read_text()
        served = foyer.served()
        assert served is not None and served.issuer == served.subject, "the self-signed stand-in is served"
    finally:
        foyer.stop()
        pebble.stop()


def test_two_instances_on_one_postgres_order_once_and_serve_the_same_certificate(tmp_path):
    """Either instance may be asked for the challenge (Pebble asks the first's plain port here): the answer is in the
    store. Only the one holding the lease orders; the other adopts what it stored. The second starts once the first
    listens, as in a rolling start (CI saw two orders, one certificate, when start-up grew slower)."""
    plain_port = free_port()
    pebble = Pebble(tmp_path, plain_port, validity=300)
    database = fresh_database()
    first = ACMEFoyer(tmp_path, pebble, plain_port, database, name="first")
    second = None
    try:
        wait_until(lambda: first.served() is not None, seconds=30, what="the first instance listening")
        second = ACMEFoyer(tmp_path, pebble, free_port(), database, name="second")
        a = wait_until(first.issued_by_pebble, seconds=60, what="the first instance's certificate from Pebble")
        b = wait_until(second.issued_by_pebble, seconds=30, what="the second instance's certificate from Pebble")
        assert a.serial_number == b.serial_number
        assert first.issued() + second.issued() == 1, "one order, under the lease, got the certificate"
        # An order whose challenge Pebble asked of an instance not yet listening fails and is tried again: any attempt
        # beyond the one that succeeded must have failed, never have run beside it.
        assert first.orders() + second.orders() == 1 + first.failed_orders() + second.failed_orders()
        for instance in (first, second):
            answered = instance.curl(pebble.root)
            assert answered.returncode == 0 and answered.stdout == "OK", answered.stderr
    finally:
        first.stop()
        if second:
            second.stop()
        pebble.stop()


def test_an_account_the_ca_no_longer_knows_is_made_again(tmp_path):
    """The CA forgets the kept account (here Pebble starts afresh): the renewal is refused with accountDoesNotExist,
    logged, and the next try makes a new account and gets the certificate."""
    plain_port = free_port()
    pebble = Pebble(tmp_path, plain_port, validity=20)
    foyer = ACMEFoyer(tmp_path, pebble, plain_port, str(tmp_path / "foyer.sqlite"))
    try:
        first = wait_until(foyer.issued_by_pebble, seconds=60, what="a certificate issued by Pebble")
        pebble.start_afresh()
        wait_until(lambda: (c := foyer.issued_by_pebble()) is not None and c.serial_number != first.serial_number,
                   seconds=60, what="a certificate from the CA that forgot the account")
        log = foyer.log_path.read_text()
        assert "accountDoesNotExist" in log and log.count("ACME account made") == 2, log
    finally:
        foyer.stop()
        pebble.stop()
