"""Accounts people own, against a real SMTP server (aiosmtpd, with STARTTLS and AUTH), real Chromium and the Unified
Push peer: sign-up, the confirmation mail and its link, a forgotten password, changing and deleting an account, the
export, and the outbox surviving an SMTP server that is away."""
import asyncio
import concurrent.futures
import datetime
import email
import email.policy
import ipaddress
import json
import re
import ssl
import threading
import urllib.request

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

from conftest import DEMO_EMAIL, RunningServer, curl_response, free_port, wait_for_page, wait_until
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_live import RawStream, get, stream_path
from test_push import PUSH_ENV, curl_json, ios_token, push_args, ups  # noqa: F401  (the Unified Push peer)

SMTP_USER, SMTP_PASSWORD = "foyer", "smtp secret"


class Recorder:
    """aiosmtpd's handler: keeps each message with whether it came over TLS and signed in."""

    def __init__(self):
        self.messages = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):
        message = email.message_from_bytes(envelope.original_content or envelope.content, policy=email.policy.default)
        with self.lock:
            self.messages.append({
                "to": envelope.rcpt_tos, "message": message, "tls": session.ssl is not None,
                "authenticated": bool(session.authenticated),
            })
        return "250 Message accepted"

    def to(self, address: str):
        with self.lock:
            return [m for m in self.messages if address in m["to"]]


class SMTPPeer:
    """A real SMTP server on loopback; `tls`: STARTTLS with a certificate of its own, required, then AUTH required."""

    def __init__(self, workdir, port=None, tls=False):
        self.port = port or free_port()
        self.recorder = Recorder()
        self.certificate = None
        self.parameters = {}
        if tls:
            self.certificate, key = make_certificate(workdir)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.certificate, key)
            self.parameters = dict(
                tls_context=context, require_starttls=True, authenticator=self.authenticate, auth_required=True, auth_require_tls=True,
            )
        self.controller = None

    @staticmethod
    def authenticate(server, session, envelope, mechanism, auth_data):
        ok = isinstance(auth_data, LoginPassword) and auth_data.login == SMTP_USER.encode() and auth_data.password == SMTP_PASSWORD.encode()
        return AuthResult(success=ok)

    def start(self):
        self.controller = Controller(self.recorder, hostname="127.0.0.1", port=self.port, **self.parameters)
        self.controller.start()

    def stop(self):
        if self.controller:
            self.controller.stop()
            self.controller = None

    def foyer_args(self):
        if self.certificate:
            return ["--smtp-url", f"smtp://{SMTP_USER}:{SMTP_PASSWORD.replace(' ', '%20')}@127.0.0.1:{self.port}",
                    "--smtp-ca-certificate", str(self.certificate)]
        return ["--smtp-url", f"smtp://127.0.0.1:{self.port}"]

    def wait_for(self, address: str, count: int = 1, seconds: float = 15):
        return wait_until(lambda: (found := self.recorder.to(address)) and len(found) >= count and found, seconds, f"mail to {address}")


def make_certificate(workdir):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    certificate_path, key_path = workdir / "smtp.pem", workdir / "smtp-key.pem"
    certificate_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return certificate_path, key_path


def text_of(message) -> str:
    return message.get_body(preferencelist=("plain",)).get_content()


def link_in(message, path: str) -> str:
    found = re.search(r"https?://\S+" + re.escape(path) + r"\S+", text_of(message))
    assert found, text_of(message)
    return found.group(0)


@pytest.fixture(scope="module")
def smtp(tmp_path_factory):
    peer = SMTPPeer(tmp_path_factory.mktemp("smtp"), tls=True)
    peer.start()
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def accounts_server(tmp_path_factory, smtp, ups):  # noqa: F811
    port = free_port()
    running = RunningServer(
        tmp_path_factory.mktemp("foyer-accounts"), port=port, extra_env=PUSH_ENV,
        extra_args=[*smtp.foyer_args(), "--mail-from", "Foyer Tests <no-reply@foyer.test>", "--public-url", f"http://127.0.0.1:{port}",
                    *push_args(ups)],
    )
    yield running
    running.stop()


def sign_up(server, name: str, email_address: str, password: str) -> tuple[int, dict, dict]:
    status, headers, body = curl_response(
        server.url + "/api/v1/users", "-H", "Content-Type: application/json",
        "--data", json.dumps({"name": name, "email": email_address, "password": password, "accept_terms": True}),
    )
    return status, headers, json.loads(body)


def sign_in(server, email_address: str, password: str) -> tuple[int, str | None]:
    status, headers, _ = curl_response(
        server.url + "/api/v1/sessions", "-H", "Content-Type: application/json",
        "--data", json.dumps({"email": email_address, "password": password}),
    )
    return status, headers.get("x-session-token")


def me(server, token: str) -> tuple[int, dict | None]:
    return curl_json(server, "GET", "/api/v1/me", token)


def test_signing_up_through_the_api_mails_a_confirmation_over_starttls_whose_button_confirms(accounts_server, smtp, browser):
    status, headers, body = sign_up(accounts_server, "Grace Hopper", "grace@example.com", "a ship in harbor is safe")
    assert status == 201, body
    token = headers["x-session-token"]
    assert "foyer_session=" in headers["set-cookie"] and body["user"]["name"] == "Grace Hopper"
    assert me(accounts_server, token)[1]["email_confirmed"] is False

    [received] = smtp.wait_for("grace@example.com")
    assert received["tls"] and received["authenticated"], "STARTTLS, then AUTH"
    message = received["message"]
    [to], [sender] = message["To"].addresses, message["From"].addresses
    assert (to.display_name, to.addr_spec) == ("Grace Hopper", "grace@example.com")
    assert (sender.display_name, sender.addr_spec) == ("Foyer Tests", "no-reply@foyer.test")
    assert message["Message-ID"].endswith("@foyer.test>")
    assert message.get_body(preferencelist=("html",)) is not None and "3 days" in text_of(message)
    link = link_in(message, "/email_confirmations/")

    # A scanner (or the person) opening the link changes nothing; the button does.
    page = browser.new_page()
    assert page.goto(link).status == 200
    assert page.locator("#confirm-email").inner_text() == "grace@example.com"
    assert me(accounts_server, token)[1]["email_confirmed"] is False
    wait_for_page(page, "window.Turbo !== undefined")
    page.click("#confirm-button")
    page.wait_for_url(accounts_server.url + "/sign_in")
    page.locator(".notice", has_text="Your address is confirmed.").wait_for()
    assert me(accounts_server, token)[1]["email_confirmed"] is True
    assert page.goto(link).status == 404, "spent"
    page.close()


def test_signing_up_through_the_form_in_chromium(accounts_server, smtp, browser):
    page = browser.new_page()
    page.goto(accounts_server.url + "/sign_in")
    page.click("#sign-up-link")
    page.wait_for_url(accounts_server.url + "/sign_up")
    wait_for_page(page, "window.Turbo !== undefined")
    page.fill("#sign-up-name", "Ada Lovelace")
    page.fill("#sign-up-email", "ada.form@example.com")
    page.fill("#sign-up-password", "password1")
    page.check("#sign-up-accept-terms")
    page.click("button[type=submit]")
    page.locator("#password-error").wait_for()
    assert "most common passwords" in page.locator("#password-error").inner_text()
    assert page.input_value("#sign-up-name") == "Ada Lovelace", "what was typed stays"
    page.fill("#sign-up-password", "the analytical engine weaves")
    page.click("button[type=submit]")
    page.wait_for_url(accounts_server.url + "/")
    # Turbo changes the URL as its visit starts: the notice is there once the visit has rendered.
    page.locator(".notice", has_text="Welcome!").wait_for()
    page.goto(accounts_server.url + "/account")
    assert page.locator("#account-email").inner_text() == "ada.form@example.com"
    assert page.locator("#unconfirmed-email").is_visible()
    assert link_in(smtp.wait_for("ada.form@example.com")[0]["message"], "/email_confirmations/")
    page.close()


def test_signing_up_is_refused_cross_site_and_a_taken_address_is_rails_style(accounts_server):
    status, _, body = curl_response(
        accounts_server.url + "/sign_up", "-H", "Origin: https://elsewhere.example", "--data", "name=x&email=x@example.com&password=long+enough+x",
    )
    assert status == 403, body
    sign_up(accounts_server, "First", "taken@example.com", "first of its name")
    status, _, body = sign_up(accounts_server, "Second", "TAKEN@example.com", "second of its name")
    assert status == 422 and body["errors"] == {"email": ["has already been taken"]}


def test_a_reset_is_answered_alike_for_an_unknown_address_and_only_a_known_one_gets_mail(accounts_server, smtp):
    sign_up(accounts_server, "Known", "known@example.com", "known person words")
    answers = [curl_json(accounts_server, "POST", "/api/v1/password_resets", None, {"email": address})
               for address in ["known@example.com", "unknown@example.com"]]
    assert answers[0] == answers[1] and answers[0][0] == 202, answers
    smtp.wait_for("known@example.com", count=2)  # the welcome, then the reset
    assert smtp.recorder.to("unknown@example.com") == []


def test_the_reset_link_sets_a_new_password_ends_every_session_and_works_once(accounts_server, smtp, browser):
    _, headers, _ = sign_up(accounts_server, "Forgetful", "forgetful@example.com", "i will forget this")
    old_token = headers["x-session-token"]
    assert curl_json(accounts_server, "POST", "/api/v1/password_resets", None, {"email": "forgetful@example.com"})[0] == 202
    reset = [m for m in smtp.wait_for("forgetful@example.com", count=2) if "Reset" in m["message"]["Subject"]][0]["message"]
    assert "one hour" in text_of(reset)
    link = link_in(reset, "/password_resets/")
    page = browser.new_page()
    assert page.goto(link).status == 200
    wait_for_page(page, "window.Turbo !== undefined")
    page.fill("#new-password", "a memorable new sentence")
    page.click("button[type=submit]")
    page.wait_for_url(accounts_server.url + "/sign_in")
    assert me(accounts_server, old_token)[0] == 401, "the old session ended"
    assert sign_in(accounts_server, "forgetful@example.com", "i will forget this")[0] == 401
    assert sign_in(accounts_server, "forgetful@example.com", "a memorable new sentence")[0] == 201
    assert page.goto(link).status == 404, "single use"
    status, _, _ = curl_response(link, "--data", "password=another+new+sentence")
    assert status == 404
    page.close()


def test_at_most_three_reset_mails_an_hour_for_an_address(accounts_server, smtp):
    sign_up(accounts_server, "Capped", "capped@example.com", "capped person words")
    for _ in range(4):
        assert curl_json(accounts_server, "POST", "/api/v1/password_resets", None, {"email": "capped@example.com"})[0] == 202
    smtp.wait_for("capped@example.com", count=4)  # the welcome and three resets
    # The fourth answered 202 and sent nothing: a fifth mail never comes while a sixth request is mailed neither.
    assert curl_json(accounts_server, "POST", "/api/v1/password_resets", None, {"email": "capped@example.com"})[0] == 202
    sign_up(accounts_server, "Marker", "marker@example.com", "marker person words")
    smtp.wait_for("marker@example.com")  # mail after the requests has arrived: theirs would have too
    resets = [m for m in smtp.recorder.to("capped@example.com") if "Reset" in m["message"]["Subject"]]
    assert len(resets) == 3


def test_a_password_change_needs_the_current_one_and_ends_the_other_sessions(accounts_server, smtp):
    _, headers, _ = sign_up(accounts_server, "Changer", "changer@example.com", "changing my mind")
    this_device = headers["x-session-token"]
    _, other_device = sign_in(accounts_server, "changer@example.com", "changing my mind")
    status, body = curl_json(accounts_server, "PATCH", "/api/v1/me", this_device, {"password": "a better phrase", "current_password": "wrong"})
    assert status == 422 and body["errors"] == {"current_password": ["is incorrect"]}
    status, body = curl_json(
        accounts_server, "PATCH", "/api/v1/me", this_device,
        {"password": "a better phrase", "current_password": "changing my mind", "name": "Changed"},
    )
    assert status == 200 and body["name"] == "Changed", body
    assert me(accounts_server, this_device)[0] == 200
    assert me(accounts_server, other_device)[0] == 401
    assert any("password was changed" in m["message"]["Subject"] for m in smtp.wait_for("changer@example.com", count=2))


def test_the_export_holds_the_account_its_sessions_and_posts(accounts_server):
    _, headers, _ = sign_up(accounts_server, "Exporter", "exporter@example.com", "take it all with me")
    token = headers["x-session-token"]
    assert curl_json(accounts_server, "POST", "/api/v1/posts", token, {"title": "Mine to take", "content": "words"})[0] == 201
    status, export = curl_json(accounts_server, "GET", "/api/v1/me/export", token)
    assert status == 200
    assert export["account"]["email"] == "exporter@example.com" and export["account"]["name"] == "Exporter"
    assert [p["title"] for p in export["posts"]] == ["Mine to take"]
    assert len(export["sessions"]) == 1 and export["sessions"][0]["ip_address"] == "127.0.0.1"


def socket_close_code_after(server, token: str, stream: RawStream, act) -> int:
    """Subscribes over graphql-transport-ws as `token`'s session, waits until `stream` (a task stream of the same
    session) is open, runs `act` (blocking, on a thread of its own), and gives the code the server then closed the
    socket with."""
    url = server.url.replace("http://", "ws://") + "/graphql"

    async def subscribe_then_act():
        async with connect(url, subprotocols=["graphql-transport-ws"]) as socket_:
            await socket_.send(json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}))
            assert json.loads(await socket_.recv())["type"] == "connection_ack"
            await socket_.send(json.dumps({"type": "subscribe", "id": "1", "payload": {"query": "subscription { taskAdded { id } }"}}))
            stream.read_until(b": tasks\n\n")
            await asyncio.to_thread(act)
            with pytest.raises(ConnectionClosedError):
                async for _ in socket_:
                    pass
            return socket_.close_code

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, asyncio.wait_for(subscribe_then_act(), 20)).result()


def test_deleting_an_account_ends_its_stream_and_websocket_and_removes_its_posts_and_device(accounts_server, smtp, ups):  # noqa: F811
    _, headers, body = sign_up(accounts_server, "Leaver", "leaver@example.com", "time for me to go")
    token = headers["x-session-token"]
    device = ios_token()
    assert curl_json(accounts_server, "POST", "/api/v1/devices", token, {"deviceToken": device, "deviceType": "ios"})[0] == 201
    wait_until(lambda: any(i.get("deviceToken") == device for i in ups.installations.values()), what="the device at UPS")
    status, post = curl_json(accounts_server, "POST", "/api/v1/posts", token, {"title": "Going with me", "content": "words"})
    assert status == 201
    _, html = get(accounts_server.url + "/tasks", headers={"Authorization": f"Bearer {token}"})
    stream = RawStream(accounts_server, stream_path(html), headers=[f"Authorization: Bearer {token}"])

    def delete():
        assert curl_json(accounts_server, "DELETE", "/api/v1/me", token, {"password": "wrong"}) == (
            422, {"error": "Password is incorrect", "errors": {"password": ["is incorrect"]}})
        status, headers, _ = curl_response(
            accounts_server.url + "/api/v1/me", "-X", "DELETE", "-H", f"Authorization: Bearer {token}",
            "-H", "Content-Type: application/json", "--data", json.dumps({"password": "time for me to go"}),
        )
        assert status == 204 and headers["clear-site-data"] == '"cache", "storage"'

    try:
        assert socket_close_code_after(accounts_server, token, stream, delete) == 4401
        assert b"event: signed-out" in stream.read_to_end()
    finally:
        stream.close()
    assert me(accounts_server, token)[0] == 401
    assert curl_json(accounts_server, "GET", f"/api/v1/posts/{post['id']}", None)[0] == 404
    wait_until(lambda: not any(i.get("deviceToken") == device for i in ups.installations.values()), what="the device gone from UPS")
    assert any("deleted" in m["message"]["Subject"] for m in smtp.wait_for("leaver@example.com", count=2))
    status, _, body = sign_up(accounts_server, "Leaver Again", "leaver@example.com", "back for more words")
    assert status == 201, "the address is free again"


def test_no_author_address_in_any_post_page_or_post_json_without_a_session(accounts_server):
    _, headers, _ = sign_up(accounts_server, "Private Author", "private.author@example.com", "keep my address mine")
    status, post = curl_json(accounts_server, "POST", "/api/v1/posts", headers["x-session-token"], {"title": "Public words", "content": "x"})
    assert status == 201 and post["author"] == {"id": post["author"]["id"], "name": "Private Author"}
    for path in ["/posts", f"/posts/{post['id']}", "/posts.json", "/api/v1/posts", f"/api/v1/posts/{post['id']}", "/"]:
        with urllib.request.urlopen(accounts_server.url + path, timeout=10) as response:
            text = response.read().decode()
        assert "private.author@example.com" not in text and DEMO_EMAIL not in text, path
        assert "Private Author" in text or path == "/", path


def test_mail_written_while_the_smtp_server_is_away_arrives_once_when_it_is_back(tmp_path):
    smtp = SMTPPeer(tmp_path)
    server = RunningServer(tmp_path, extra_args=smtp.foyer_args())
    try:
        assert sign_up(server, "Patient", "patient@example.com", "i can wait a while")[0] == 201

        def retried():
            with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
                return re.search(r'foyer_mail_total\{outcome="retried"\} ([1-9])', response.read().decode())
        wait_until(retried, seconds=15, what="a failed attempt")
        smtp.start()
        smtp.wait_for("patient@example.com", seconds=30)

        def sent():
            with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
                return re.search(r'foyer_mail_total\{outcome="sent"\} (\d+)', response.read().decode()).group(1) == "1"
        wait_until(sent, what="the sent count")
        # Another sign-up's mail arrives after it: had the first been sent twice, both copies would be here by now.
        sign_up(server, "Later", "later@example.com", "after the patient one")
        smtp.wait_for("later@example.com")
        assert len(smtp.recorder.to("patient@example.com")) == 1
    finally:
        server.stop()
        smtp.stop()


def test_without_smtp_mail_is_written_beside_the_database_and_its_link_logged(own_server):
    assert sign_up(own_server, "Newcomer", "newcomer@example.com", "fresh clone words")[0] == 201
    folder = own_server.database.parent / "foyer-mail"
    [eml] = wait_until(lambda: list(folder.glob("*.eml")), what="an .eml file")
    message = email.message_from_bytes(eml.read_bytes(), policy=email.policy.default)
    link = link_in(message, "/email_confirmations/")
    wait_until(lambda: link in own_server.log_path.read_text(), what="the link in the log")


def test_the_account_page_changes_the_name_and_deletes_the_account_after_its_own_confirmation_page(accounts_server, browser):
    context = browser.new_context()
    page = context.new_page()
    page.goto(accounts_server.url + "/sign_up")
    wait_for_page(page, "window.Turbo !== undefined")
    page.fill("#sign-up-name", "Page Person")
    page.fill("#sign-up-email", "page.person@example.com")
    page.fill("#sign-up-password", "pages all the way down")
    page.check("#sign-up-accept-terms")
    page.click("button[type=submit]")
    page.wait_for_url(accounts_server.url + "/")
    page.goto(accounts_server.url + "/account")
    page.fill("#account-name", "Renamed Person")
    page.click("#name-form button[type=submit]")
    page.locator(".notice", has_text="Your name is changed.").wait_for()
    assert page.input_value("#account-name") == "Renamed Person"
    assert "Renamed Person" in page.locator("nav .account-link").inner_text()

    page.click("#delete-account-link")
    page.wait_for_url(accounts_server.url + "/account/delete")
    page.locator("#what-goes", has_text="1 signed-in session").wait_for()
    page.fill("#delete-password", "not my password")
    page.click("#delete-account")
    page.locator("#delete-password-error").wait_for()
    assert page.locator("#delete-password-error").inner_text() == "Password is incorrect"
    page.fill("#delete-password", "pages all the way down")
    page.click("#delete-account")
    page.wait_for_url(accounts_server.url + "/")
    page.locator(".notice", has_text="Your account and everything in it are deleted.").wait_for()
    assert page.goto(accounts_server.url + "/account").status == 401
    assert sign_in(accounts_server, "page.person@example.com", "pages all the way down")[0] == 401
    context.close()


def test_reset_requests_past_the_clients_limit_get_the_form_again_with_429(own_server):
    def ask():
        return curl_response(own_server.url + "/password_resets", "--data", "email=someone%40example.com")
    for _ in range(20):
        assert ask()[0] == 303
    status, headers, body = ask()
    assert status == 429 and int(headers["retry-after"]) > 0
    assert "was asked for too often from here" in body and 'action="/password_resets"' in body
    assert 'value="someone@example.com"' in body, "what was typed stays"
