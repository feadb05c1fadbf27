"""Passkeys through the JSON API, with a software authenticator made of the `fido2` package (soft_authenticator.py):
the three algorithms, Android apps' origins, and what must be refused (another site, another RP ID, a replay, an
expired challenge, a counter that goes back, a credential twice). And the association files apps fetch."""
import base64
import hashlib
import json
import pathlib
import sqlite3
import time
import urllib.error
import urllib.request

import pytest

from conftest import DEMO_EMAIL, RunningServer, wait_until
from dpop_client import DeviceKey
from soft_authenticator import SoftAuthenticator, b64url
from test_graphql import session_token

APP_ID = "ABCDE12345.com.example.foyer"
PACKAGE = "com.example.foyer"
FINGERPRINT = ":".join(f"{byte:02X}" for byte in hashlib.sha256(b"the app's signing certificate").digest())
OTHER_FINGERPRINT = ":".join(f"{byte:02X}" for byte in hashlib.sha256(b"someone else's certificate").digest())


def android_origin(fingerprint: str) -> str:
    return "android:apk-key-hash:" + b64url(bytes.fromhex(fingerprint.replace(":", "")))


@pytest.fixture(scope="module")
def apps_server(tmp_path_factory):
    running = RunningServer(tmp_path_factory.mktemp("passkeys-api"), extra_args=[
        "--ios-app-id", APP_ID, "--android-package", PACKAGE, "--android-certificate-fingerprint", FINGERPRINT,
    ])
    yield running
    running.stop()


def call(server, method: str, path: str, body=None, token: str | None = None, headers: dict | None = None):
    request = urllib.request.Request(server.url + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", "Accept": "application/json", **(headers or {})})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, dict(response.headers), json.loads(raw) if raw.strip() else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        return error.code, dict(error.headers), json.loads(raw) if raw.strip() else None


def counted(server, series: str) -> float:
    """A sample of /metrics, by its name and labels as written there (0 when not written yet)."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return 0


def register(server, token: str, authenticator: SoftAuthenticator, name: str | None = None, **lie):
    status, _, options = call(server, "POST", "/api/v1/passkeys/registration_options", {}, token)
    assert status == 200, options
    credential = authenticator.register(options, **lie)
    return call(server, "POST", "/api/v1/passkeys", {**credential, **({"name": name} if name else {})}, token)


def sign_in(server, authenticator: SoftAuthenticator, headers: dict | None = None, **lie):
    status, _, options = call(server, "POST", "/api/v1/passkeys/authentication_options", {})
    assert status == 200 and len(base64.urlsafe_b64decode(options["challenge"] + "==")) >= 16, options
    return call(server, "POST", "/api/v1/sessions", {"passkey": authenticator.get(options, **lie)}, headers=headers)


@pytest.mark.parametrize("algorithm", ["ES256", "EdDSA", "RS256"])
def test_each_algorithm_registers_and_signs_in_as_a_password_does(apps_server, algorithm):
    token = session_token(apps_server)
    authenticator = SoftAuthenticator(algorithm, origin=apps_server.url)
    status, _, made = register(apps_server, token, authenticator, name=f"Soft {algorithm}")
    assert status == 201 and made["name"] == f"Soft {algorithm}" and made["synced"] is True and made["last_used_at"] is None, made
    # The account is told of the new way in, by mail (the default delivery: a file per message beside the database).
    mails = pathlib.Path(apps_server.database).parent / "foyer-mail"
    wait_until(lambda: any(f"Soft {algorithm}" in mail.read_text(errors="replace") for mail in mails.glob("*.eml")), what="the notice mail")
    status, headers, session = sign_in(apps_server, authenticator)
    assert status == 201 and headers["X-Session-Token"] and "foyer_session=" in headers["Set-Cookie"], session
    assert call(apps_server, "GET", "/api/v1/me", token=headers["X-Session-Token"])[2]["email"] == DEMO_EMAIL
    listed = call(apps_server, "GET", "/api/v1/passkeys", token=token)[2]
    assert next(p for p in listed if p["id"] == made["id"])["last_used_at"] is not None


def test_the_options_are_what_the_browsers_json_parsers_take(apps_server):
    token = session_token(apps_server)
    authenticator = SoftAuthenticator("ES256", origin=apps_server.url)
    assert register(apps_server, token, authenticator)[0] == 201
    status, headers, options = call(apps_server, "POST", "/api/v1/passkeys/registration_options", {}, token)
    assert status == 200 and headers["Cache-Control"] == "no-store"
    assert options["rp"] == {"id": "127.0.0.1", "name": "Foyer"}
    assert [p["alg"] for p in options["pubKeyCredParams"]] == [-7, -8, -257]
    assert options["authenticatorSelection"] == {"residentKey": "required", "requireResidentKey": True, "userVerification": "required"}
    assert options["attestation"] == "none" and options["timeout"] == 300000
    handle = base64.urlsafe_b64decode(options["user"]["id"] + "==")
    assert 16 <= len(handle) <= 64 and DEMO_EMAIL.encode() not in handle and options["user"]["name"] == DEMO_EMAIL
    assert b64url(authenticator.credential_id) in [c["id"] for c in options["excludeCredentials"]]
    status, _, request_options = call(apps_server, "POST", "/api/v1/passkeys/authentication_options", {})
    assert request_options["rpId"] == "127.0.0.1" and request_options["userVerification"] == "required"
    assert request_options["allowCredentials"] == []


def test_an_android_apps_origin_is_accepted_only_for_the_configured_certificate(apps_server):
    token = session_token(apps_server)
    authenticator = SoftAuthenticator("ES256", origin=android_origin(FINGERPRINT))
    assert register(apps_server, token, authenticator)[0] == 201
    assert sign_in(apps_server, authenticator)[0] == 201
    status, _, refused = sign_in(apps_server, authenticator, origin=android_origin(OTHER_FINGERPRINT))
    assert status == 401 and "not this site" in refused["error_description"], refused


def test_what_another_site_a_replay_or_an_old_challenge_sends_is_refused_and_opens_no_session(apps_server):
    token = session_token(apps_server)
    authenticator = SoftAuthenticator("ES256", origin=apps_server.url)
    assert register(apps_server, token, authenticator)[0] == 201
    refusals = {
        "another site": sign_in(apps_server, authenticator, origin="https://foyer.example.evil"),
        "another RP ID": sign_in(apps_server, authenticator, rp_id="foyer.example.evil"),
        "no user verification": sign_in(apps_server, authenticator, flags=SoftAuthenticator.UP),
        "no user presence": sign_in(apps_server, authenticator, flags=SoftAuthenticator.UV),
    }
    for why, (status, headers, body) in refusals.items():
        assert status == 401 and "X-Session-Token" not in headers, (why, body)
    assert "not this site" in refusals["another site"][2]["error_description"]
    assert "another relying party" in refusals["another RP ID"][2]["error_description"]

    # The same assertion twice: its challenge was spent by the first.
    status, _, options = call(apps_server, "POST", "/api/v1/passkeys/authentication_options", {})
    assertion = authenticator.get(options)
    assert call(apps_server, "POST", "/api/v1/sessions", {"passkey": assertion})[0] == 201
    status, _, replayed = call(apps_server, "POST", "/api/v1/sessions", {"passkey": assertion})
    assert status == 401 and "used already" in replayed["error_description"], replayed

    # A challenge past its five minutes (made so in the store).
    status, _, options = call(apps_server, "POST", "/api/v1/passkeys/authentication_options", {})
    with sqlite3.connect(apps_server.database) as db:
        db.execute("UPDATE passkey_challenges SET expires_at = '2020-01-01 00:00:00.000' WHERE challenge = ?", (options["challenge"],))
    status, _, expired = call(apps_server, "POST", "/api/v1/sessions", {"passkey": authenticator.get(options)})
    assert status == 401 and "expired" in expired["error_description"], expired

    # A counter that does not rise: a copy of the authenticator. Refused and counted; the original goes on.
    series = 'foyer_passkey_ceremonies_total{ceremony="authentication",outcome="counter"}'
    before, original = counted(apps_server, series), authenticator.counter
    status, _, cloned = sign_in(apps_server, authenticator, counter=1)
    assert status == 401 and "counter did not rise" in cloned["error_description"], cloned
    assert counted(apps_server, series) == before + 1
    authenticator.counter = original
    assert sign_in(apps_server, authenticator)[0] == 201


def test_a_passkey_is_registered_once_and_only_right_after_signing_in(apps_server):
    token = session_token(apps_server)
    authenticator = SoftAuthenticator("ES256", origin=apps_server.url)
    assert register(apps_server, token, authenticator)[0] == 201
    status, _, twice = register(apps_server, token, authenticator)
    assert status == 422 and "registered already" in twice["error"], twice
    too_long = SoftAuthenticator("ES256", origin=apps_server.url, credential_id=bytes(1024))
    status, _, refused = register(apps_server, token, too_long)
    assert status == 422 and "1024 bytes" in refused["error"], refused
    status, _, wrong_site = register(apps_server, token, SoftAuthenticator("ES256", origin="https://foyer.example.evil"))
    assert status == 422 and "not this site" in wrong_site["error"]

    # Eleven minutes after signing in (made so in the store before the session's first use), a session may still do
    # everything but add a way in.
    earlier = session_token(apps_server)
    with sqlite3.connect(apps_server.database) as db:
        old = time.strftime("%Y-%m-%d %H:%M:%S.000", time.gmtime(time.time() - 660))
        db.execute("UPDATE sessions SET created_at = ? WHERE token_hash = ?", (old, hashlib.sha256(earlier.encode()).hexdigest()))
    assert call(apps_server, "GET", "/api/v1/passkeys", token=earlier)[0] == 200
    status, _, stale = call(apps_server, "POST", "/api/v1/passkeys/registration_options", {}, earlier)
    assert status == 403 and "sign in again" in stale["error"].lower(), stale


def test_a_passkey_is_renamed_and_removed_and_then_signs_in_no_more(apps_server):
    token = session_token(apps_server)
    authenticator = SoftAuthenticator("EdDSA", origin=apps_server.url)
    status, _, made = register(apps_server, token, authenticator)
    status, _, renamed = call(apps_server, "PATCH", f"/api/v1/passkeys/{made['id']}", {"name": "Work phone"}, token)
    assert status == 200 and renamed["name"] == "Work phone"
    assert call(apps_server, "PATCH", f"/api/v1/passkeys/{made['id']}", {"name": "  "}, token)[0] == 422
    assert call(apps_server, "DELETE", f"/api/v1/passkeys/{made['id']}", token=token)[0] == 204
    assert call(apps_server, "DELETE", f"/api/v1/passkeys/{made['id']}", token=token)[0] == 404
    status, _, gone = sign_in(apps_server, authenticator)
    assert status == 401 and "not registered here" in gone["error_description"]


def test_a_passkey_sign_in_with_a_dpop_proof_opens_a_session_bound_to_the_apps_key(apps_server):
    token = session_token(apps_server)
    authenticator = SoftAuthenticator("ES256", origin=apps_server.url)
    assert register(apps_server, token, authenticator)[0] == 201
    key = DeviceKey()
    status, headers, session = sign_in(apps_server, authenticator, headers={"DPoP": key.proof("POST", apps_server.url + "/api/v1/sessions")})
    assert status == 201 and session["token_type"] == "DPoP", session
    bound = headers["X-Session-Token"]
    assert call(apps_server, "GET", "/api/v1/me", token=bound)[0] == 401, "a bound token alone is worthless"
    status, _, me = call(apps_server, "GET", "/api/v1/me", headers=key.headers("GET", apps_server.url + "/api/v1/me", bound))
    assert status == 200 and me["email"] == DEMO_EMAIL


def test_garbage_in_place_of_a_passkey_is_a_4xx_never_a_5xx(apps_server):
    for body in [{"passkey": {}}, {"passkey": {"id": "x", "rawId": "x", "type": "public-key", "response": {
            "clientDataJSON": "!!", "authenticatorData": "AA", "signature": "AA"}}}, {"passkey": "text"}]:
        status, _, answer = call(apps_server, "POST", "/api/v1/sessions", body)
        assert 400 <= status < 500, (body, answer)


def test_the_association_files_say_which_apps_open_links_and_share_passkeys(apps_server, tmp_path):
    status, headers, apple = call(apps_server, "GET", "/.well-known/apple-app-site-association")
    assert status == 200 and headers["Content-Type"] == "application/json" and headers["ETag"]
    details = apple["applinks"]["details"]
    assert details[0]["appIDs"] == [APP_ID] and apple["webcredentials"]["apps"] == [APP_ID]
    components = details[0]["components"]
    excluded = {component["/"] for component in components if component.get("exclude")}
    assert {"/api/*", "/pictures/*", "/streams/*", "/graphql", "/sign_out"} <= excluded
    assert components[-1] == {"/": "/*"}, "pages go to the app, after the exclusions (Apple reads them in order)"
    status, headers, android = call(apps_server, "GET", "/.well-known/assetlinks.json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert android == [{
        "relation": ["delegate_permission/common.handle_all_urls", "delegate_permission/common.get_login_creds"],
        "target": {"namespace": "android_app", "package_name": PACKAGE, "sha256_cert_fingerprints": [FINGERPRINT]},
    }]
    etag = call(apps_server, "GET", "/.well-known/assetlinks.json")[1]["ETag"]
    assert call(apps_server, "GET", "/.well-known/assetlinks.json", headers={"If-None-Match": etag})[0] == 304
    plain = RunningServer(tmp_path)
    try:
        for path in ["/.well-known/apple-app-site-association", "/.well-known/assetlinks.json"]:
            assert call(plain, "GET", path)[0] == 404, path
    finally:
        plain.stop()
