"""Signing in with any OpenID Connect provider, against two real ones not laid out like Keycloak: nanoidp at its own
root (JWT access tokens) and django-oidc-provider under Django's /openid/ (opaque access tokens, checked by
introspection). Browsers sign in through each in Chromium; apps present their access tokens as Bearer, or trade the
ID token the provider gave them for a Foyer session."""
import base64
import hashlib
import json
import re
import secrets
import sqlite3
import time
import urllib.parse

import pytest
import requests

from conftest import OIDCProviderPeer, RunningServer, free_port
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)


@pytest.fixture(scope="module")
def foyer_port():
    """Chosen before the providers start: Foyer's callbacks must be registered redirect URIs there."""
    return free_port()


@pytest.fixture(scope="module")
def nanoidp(tmp_path_factory, foyer_port):
    peer = OIDCProviderPeer("nanoidp_provider.py", tmp_path_factory.mktemp("nanoidp"), "",
                            redirect_uris=[f"http://127.0.0.1:{foyer_port}/sign_in/nanoidp/callback"])
    peer.keys_dir = peer.workdir / "nanoidp-root" / "keys"
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def django(tmp_path_factory, foyer_port):
    peer = OIDCProviderPeer("django_provider.py", tmp_path_factory.mktemp("django-oidc"), "/openid",
                            redirect_uris=[f"http://127.0.0.1:{foyer_port}/sign_in/django/callback"])
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def foyer(tmp_path_factory, nanoidp, django, foyer_port):
    """Two providers at once, from a providers file; local accounts stay on beside them."""
    workdir = tmp_path_factory.mktemp("foyer-oidc")
    providers = workdir / "providers.json"
    providers.write_text(json.dumps([
        {"name": "nanoidp", "display_name": "NanoIDP", "issuer": nanoidp.issuer, "client_id": nanoidp.client_id,
         "client_secret_env": "NANOIDP_SECRET", "roles_claim": "groups", "app_client_ids": [nanoidp.app_client_id]},
        {"name": "django", "display_name": "Django", "issuer": django.issuer, "client_id": django.client_id,
         "client_secret_env": "DJANGO_SECRET", "app_client_ids": [django.app_client_id],
         "audiences": [django.client_id, django.app_client_id]},
    ]))
    running = RunningServer(
        workdir, extra_env={"NANOIDP_SECRET": nanoidp.client_secret, "DJANGO_SECRET": django.client_secret},
        extra_args=["--oidc-providers", str(providers)], port=foyer_port,
    )
    yield running
    running.stop()


def call(foyer, method: str, path: str, token: str | None = None, body: dict | None = None):
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return requests.request(method, foyer.url + path, headers=headers, json=body, allow_redirects=False, timeout=60)


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def app_tokens_from_nanoidp(nanoidp, username: str, nonce: str | None = None) -> dict:
    """What AppAuth does in the app: the provider's login page, then code + PKCE verifier for tokens."""
    verifier, challenge = pkce()
    query = {"response_type": "code", "client_id": nanoidp.app_client_id, "redirect_uri": nanoidp.app_redirect_uri,
             "scope": "openid email profile", "state": "s", "code_challenge": challenge, "code_challenge_method": "S256"}
    if nonce:
        query["nonce"] = nonce
    session = requests.Session()
    page = session.get(nanoidp.url + "/authorize", params=query, timeout=30)
    transaction = re.search(r'name="transaction_id" value="([^"]+)"', page.text).group(1)
    answer = session.post(page.url, data={"transaction_id": transaction, "username": username, "password": f"{username} password"},
                          allow_redirects=False, timeout=30)
    code = urllib.parse.parse_qs(urllib.parse.urlparse(answer.headers["Location"]).query)["code"][0]
    tokens = requests.post(nanoidp.url + "/token", data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": nanoidp.app_redirect_uri,
        "client_id": nanoidp.app_client_id, "code_verifier": verifier}, timeout=30)
    assert tokens.status_code == 200, tokens.text
    return tokens.json()


def app_tokens_from_django(django, username: str, nonce: str | None = None) -> dict:
    session = requests.Session()
    session.get(django.url + "/accounts/login/", timeout=30)
    signed_in = session.post(django.url + "/accounts/login/", allow_redirects=False, timeout=30, data={
        "csrfmiddlewaretoken": session.cookies["csrftoken"], "username": username, "password": f"{username} password", "next": "/"})
    assert signed_in.status_code == 302, signed_in.text[:300]
    verifier, challenge = pkce()
    query = {"response_type": "code", "client_id": django.app_client_id, "redirect_uri": django.app_redirect_uri,
             "scope": "openid email profile", "state": "s", "code_challenge": challenge, "code_challenge_method": "S256"}
    if nonce:
        query["nonce"] = nonce
    answer = session.get(django.url + "/openid/authorize", params=query, allow_redirects=False, timeout=30)
    if answer.status_code == 200:  # django-oidc-provider asks a public client's user for consent every time
        fields = dict(re.findall(r'<input name="([^"]+)" type="hidden" value="([^"]*)"', answer.text))
        fields["csrfmiddlewaretoken"] = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', answer.text).group(1)
        answer = session.post(django.url + "/openid/authorize", data={**fields, "allow": "Authorize"}, allow_redirects=False, timeout=30)
    code = urllib.parse.parse_qs(urllib.parse.urlparse(answer.headers["Location"]).query)["code"][0]
    tokens = requests.post(django.url + "/openid/token", data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": django.app_redirect_uri,
        "client_id": django.app_client_id, "code_verifier": verifier}, timeout=30)
    assert tokens.status_code == 200, tokens.text
    return tokens.json()


def claims_of(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def nanoidp_signed(nanoidp, claims: dict, kid: str | None = None, key=None) -> str:
    """Signed with nanoidp's own private key (from its key directory), unless another key is given."""
    import jwt
    key = key or (nanoidp.keys_dir / "rsa_private.pem").read_bytes()
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid or (nanoidp.keys_dir / "kid.txt").read_text().strip()})


def id_token_sign_in(foyer, provider: str, id_token: str, nonce: str | None = None):
    body = {"provider": provider, "id_token": id_token}
    if nonce is not None:
        body["nonce"] = nonce
    return call(foyer, "POST", "/api/v1/sessions", body=body)


# --- Both buttons, and a browser through each provider's own login page (code + PKCE, in Chromium) ---

def test_the_sign_in_page_offers_each_provider_beside_the_password_form(foyer):
    page = requests.get(foyer.url + "/sign_in", timeout=30).text
    assert 'id="nanoidp-sign-in" href="/sign_in/nanoidp"' in page and "Sign in with NanoIDP" in page
    assert 'id="django-sign-in" href="/sign_in/django"' in page and "Sign in with Django" in page
    assert 'inputmode="email"' in page and 'name="email"' in page, "local accounts stay on beside the providers"


@pytest.mark.parametrize("provider, username, login_url, email", [
    ("nanoidp", "finn", r".*/authorize\?.*", "finn@example.com"),
    ("django", "dan", r".*/accounts/login/\?next=.*", "dan@example.net"),
])
def test_a_browser_signs_in_through_each_providers_own_page(foyer, browser, provider, username, login_url, email):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    assert page.goto(foyer.url + "/tasks/new").status == 401
    page.click(f"#{provider}-sign-in")
    page.wait_for_url(re.compile(login_url))
    page.fill("#username", username)
    page.fill("#password", f"{username} password")
    page.click("button[type=submit]")
    page.wait_for_url(foyer.url + "/tasks/new")
    page.goto(foyer.url + "/account")
    assert page.locator("#account-email").inner_text() == email
    assert page.locator("#account-provider").inner_text() == {"nanoidp": "NanoIDP", "django": "Django"}[provider]
    claims = dict(zip(page.locator(f"#{provider}-claims dt").all_inner_texts(), page.locator(f"#{provider}-claims dd").all_inner_texts()))
    assert claims["aud"] == "foyer-web" and claims["sub"]
    account_page = page.content()
    me = json.loads(page.goto(foyer.url + "/api/v1/me").text())
    assert me["provider"] == provider and me["email"] == email
    # The session cookie is Foyer's own, opaque; the provider's tokens stay on the server: none of those Foyer keeps
    # for this session is in any cookie the browser holds, on any site, nor in what Foyer's pages gave it.
    cookies = context.cookies()
    session_cookie = next(cookie["value"] for cookie in cookies if cookie["name"] == "foyer_session")
    with sqlite3.connect(foyer.database) as db:
        held = db.execute(
            "SELECT access_token, refresh_token, id_token FROM keycloak_tokens JOIN sessions ON sessions.id = session_id "
            "WHERE provider = ? AND token_hash = ?", (provider, hashlib.sha256(session_cookie.encode()).hexdigest()),
        ).fetchone()
    assert held and held[0], "Foyer holds the provider's access token for this browser's session"
    held_tokens = [token for token in held if token]
    assert not any(token in cookie["value"] for token in held_tokens for cookie in cookies), [cookie["name"] for cookie in cookies]
    assert not any(token in account_page for token in held_tokens)
    context.close()


def test_signing_a_browser_out_ends_its_session_at_the_provider_too(foyer, django, browser):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    page.goto(foyer.url + "/sign_in/django")
    page.fill("#username", "carol")
    page.fill("#password", "carol password")
    page.click("button[type=submit]")
    page.wait_for_url(foyer.url + "/")
    seen = []
    page.on("request", lambda request: seen.append(request.url) if request.is_navigation_request() else None)
    page.click("nav button:has-text('Sign out')")
    page.wait_for_url(foyer.url + "/")
    end_session = [url for url in seen if url.startswith(django.url + "/openid/end-session")]
    assert end_session, seen
    query = urllib.parse.parse_qs(urllib.parse.urlparse(end_session[0]).query)
    assert query["client_id"] == ["foyer-web"] and query["post_logout_redirect_uri"] == [foyer.url + "/"]
    assert claims_of(query["id_token_hint"][0])["aud"] == "foyer-web"
    # Django's own session ended: its login page is asked for again.
    page.goto(foyer.url + "/sign_in/django")
    page.wait_for_url(re.compile(r".*/accounts/login/.*"))
    context.close()


# --- Apps: Bearer access tokens, JWT (nanoidp) or opaque (django, by introspection) ---

def test_access_tokens_from_each_provider_are_bearer_credentials(foyer, nanoidp, django):
    jwt_token = app_tokens_from_nanoidp(nanoidp, "erin")["access_token"]
    assert jwt_token.count(".") == 2
    answer = call(foyer, "GET", "/api/v1/me", jwt_token)
    assert answer.status_code == 200 and answer.json()["provider"] == "nanoidp" and answer.json()["email"] == "erin@example.com"

    opaque = app_tokens_from_django(django, "dan")["access_token"]
    assert re.fullmatch(r"[0-9a-f]{32}", opaque), opaque
    answer = call(foyer, "GET", "/api/v1/me", opaque)
    assert answer.status_code == 200 and answer.json() == {**answer.json(), "provider": "django", "email": "dan@example.net"}
    # A token neither Foyer nor any provider knows is refused, as an unknown session token always was.
    assert call(foyer, "GET", "/api/v1/me", secrets.token_hex(16)).status_code == 401


def test_a_providers_groups_claim_decides_who_may_delete_a_task(foyer, nanoidp):
    erin = app_tokens_from_nanoidp(nanoidp, "erin")["access_token"]  # groups: admin, staff
    finn = app_tokens_from_nanoidp(nanoidp, "finn")["access_token"]  # groups: staff
    created = call(foyer, "POST", "/graphql", finn, {"query": 'mutation { createTask(title: "Groups", description: "who deletes") { id } }'})
    task_id = created.json()["data"]["createTask"]["id"]
    refused = call(foyer, "DELETE", f"/tasks/{task_id}", finn)
    assert refused.status_code == 403 and "admin" in refused.text
    assert call(foyer, "DELETE", f"/tasks/{task_id}", erin).status_code == 303


# --- Native apps trade the ID token their provider gave them for a Foyer session ---

def test_an_apps_id_token_opens_a_session_shared_with_its_webview(foyer, nanoidp, django):
    for provider, tokens, email in [
        ("nanoidp", app_tokens_from_nanoidp(nanoidp, "finn"), "finn@example.com"),
        ("django", app_tokens_from_django(django, "carol"), "carol@example.net"),
    ]:
        answer = id_token_sign_in(foyer, provider, tokens["id_token"])
        assert answer.status_code == 201, answer.text
        token = answer.headers["X-Session-Token"]
        assert "foyer_session=" + token in answer.headers["Set-Cookie"] and answer.headers["Cache-Control"] == "no-store"
        me = call(foyer, "GET", "/api/v1/me", token).json()
        assert me["provider"] == provider and me["email"] == email
        # The same person as their browser sign-in or Bearer token: found by provider and subject.
        assert me["id"] == call(foyer, "GET", "/api/v1/me", tokens["access_token"]).json()["id"]


def test_nonces_are_checked_as_sent_or_hashed_as_sign_in_with_apple_sends_them(foyer, django, nanoidp):
    raw = secrets.token_urlsafe(16)
    tokens = app_tokens_from_django(django, "dan", nonce=raw)
    assert id_token_sign_in(foyer, "django", tokens["id_token"], nonce="another").status_code == 401
    assert id_token_sign_in(foyer, "django", tokens["id_token"]).status_code == 401, "the token has a nonce: one must be sent"
    assert id_token_sign_in(foyer, "django", tokens["id_token"], nonce=raw).status_code == 201
    # Sign in with Apple: the app gives the provider SHA-256(nonce) and Foyer the nonce itself.
    hashed = app_tokens_from_nanoidp(nanoidp, "erin", nonce=hashlib.sha256(raw.encode()).hexdigest())
    assert claims_of(hashed["id_token"])["nonce"] == hashlib.sha256(raw.encode()).hexdigest()
    assert id_token_sign_in(foyer, "nanoidp", hashed["id_token"], nonce=raw).status_code == 201


def test_id_tokens_that_do_not_check_out_are_refused_each_with_its_reason(foyer, nanoidp, django):
    from cryptography.hazmat.primitives.asymmetric import rsa
    good = app_tokens_from_nanoidp(nanoidp, "finn")["id_token"]
    claims = claims_of(good)
    now = int(time.time())
    unsigned = lambda header, body: ".".join(  # noqa: E731
        base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode() for part in (header, body)) + "."
    refused = {
        "an access token, for Foyer's client": (app_tokens_from_nanoidp(nanoidp, "finn")["access_token"], "not for an app Foyer accepts"),
        "wrong audience": (nanoidp_signed(nanoidp, {**claims, "aud": "someone-elses-app"}), "not for an app Foyer accepts"),
        "an access token for the app": (nanoidp_signed(nanoidp, {**claims, "token_use": "access"}), "not an ID token"),
        "expired": (nanoidp_signed(nanoidp, {**claims, "iat": now - 900, "exp": now - 600}), "expired"),
        "issued in the future": (nanoidp_signed(nanoidp, {**claims, "iat": now + 600, "exp": now + 900}), "in the future"),
        "wrong issuer": (nanoidp_signed(nanoidp, {**claims, "iss": "http://127.0.0.1:1"}), "not by this provider"),
        "forged signature": (nanoidp_signed(nanoidp, claims, key=rsa.generate_private_key(public_exponent=65537, key_size=2048)),
                             "signature does not verify"),
        "alg none": (unsigned({"alg": "none", "kid": (nanoidp.keys_dir / "kid.txt").read_text().strip()}, claims), "signed with none"),
        "the other provider's key": (app_tokens_from_django(django, "dan")["id_token"], "key the provider does not publish"),
        "nonce mismatch": (nanoidp_signed(nanoidp, {**claims, "nonce": "the app's"}), "nonce"),
    }
    for name, (token, reason) in refused.items():
        answer = id_token_sign_in(foyer, "nanoidp", token, nonce="not the app's" if name == "nonce mismatch" else None)
        assert answer.status_code == 401, (name, answer.text)
        assert answer.json()["error"] == "invalid_token" and reason in answer.json()["error_description"], (name, answer.json())
        assert "invalid_token" in answer.headers["WWW-Authenticate"], name
    assert id_token_sign_in(foyer, "nanoidp", good).status_code == 201, "the good one still passes"
    unknown = id_token_sign_in(foyer, "okta", good)
    assert unknown.status_code == 401 and "nanoidp, django" in unknown.json()["error_description"]
    assert call(foyer, "POST", "/api/v1/sessions", body={"id_token": good}).status_code == 422, "no provider named"


def test_passwords_go_to_a_provider_only_where_it_allows_the_password_grant(foyer):
    answer = call(foyer, "POST", "/api/v1/sessions", body={"provider": "nanoidp", "username": "erin", "password": "erin password"})
    assert answer.status_code == 201 and call(foyer, "GET", "/api/v1/me", answer.headers["X-Session-Token"]).json()["provider"] == "nanoidp"
    answer = call(foyer, "POST", "/api/v1/sessions", body={"provider": "django", "username": "dan", "password": "dan password"})
    assert answer.status_code == 422 and "does not allow signing in with a password" in answer.json()["error"]


# --- The provider ends sessions over the back channel ---

def test_a_logout_token_from_the_provider_ends_the_sessions_of_its_subject(foyer, nanoidp):
    from test_keycloak import BACKCHANNEL_EVENT
    tokens = app_tokens_from_nanoidp(nanoidp, "finn")
    phone = id_token_sign_in(foyer, "nanoidp", tokens["id_token"]).headers["X-Session-Token"]
    erin = id_token_sign_in(foyer, "nanoidp", app_tokens_from_nanoidp(nanoidp, "erin")["id_token"]).headers["X-Session-Token"]
    now = int(time.time())
    logout = nanoidp_signed(nanoidp, {"iss": nanoidp.issuer, "aud": nanoidp.client_id, "iat": now, "exp": now + 120, "sub": "finn",
                                      "jti": secrets.token_hex(8), "events": {BACKCHANNEL_EVENT: {}}})
    answer = requests.post(foyer.url + "/sign_in/nanoidp/backchannel_logout", data={"logout_token": logout}, timeout=30)
    assert answer.status_code == 200 and answer.json()["sessions_ended"] >= 1, answer.text
    assert call(foyer, "GET", "/api/v1/me", phone).status_code == 401
    assert call(foyer, "GET", "/api/v1/me", erin).status_code == 200
    # The other provider's route does not take nanoidp's tokens.
    assert requests.post(foyer.url + "/sign_in/django/backchannel_logout", data={"logout_token": logout}, timeout=30).status_code == 400


# --- One provider from flags; an issuer that does not match its discovery document ---

def test_one_provider_from_flags_and_a_mismatched_issuer_is_said_plainly(tmp_path, nanoidp, django):
    running = RunningServer(
        tmp_path, extra_env={"FOYER_OIDC_CLIENT_SECRET": nanoidp.client_secret},
        extra_args=["--oidc-issuer", nanoidp.issuer, "--oidc-client-id", nanoidp.client_id, "--oidc-name", "Staff SSO",
                    "--oidc-app-client-ids", nanoidp.app_client_id],
    )
    try:
        assert 'id="staff-sso-sign-in" href="/sign_in/staff-sso"' in requests.get(running.url + "/sign_in", timeout=30).text
        tokens = app_tokens_from_nanoidp(nanoidp, "erin")
        assert call(running, "GET", "/api/v1/me", tokens["access_token"]).json()["provider"] == "staff-sso"
        assert id_token_sign_in(running, "staff-sso", tokens["id_token"]).status_code == 201
    finally:
        running.stop()
    # Discovery §4.3: the issuer named in the document must be the one configured, exactly (here, a trailing slash).
    mismatched = RunningServer(
        tmp_path / "mismatch", extra_args=["--oidc-issuer", django.issuer + "/", "--oidc-client-id", django.client_id, "--oidc-name", "Django"],
    ) if (tmp_path / "mismatch").mkdir() is None else None
    try:
        answer = requests.get(mismatched.url + "/sign_in/django", headers={"Accept": "application/json"}, allow_redirects=False, timeout=30)
        assert answer.status_code == 502 and f"names the issuer {django.issuer}, not {django.issuer}/" in answer.json()["error"], answer.text
    finally:
        mismatched.stop()
