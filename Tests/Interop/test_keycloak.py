"""Keycloak sign-in and token relay against a real OIDC provider (nanoidp in Keycloak's layout) and the ariadne task
server checking every relayed token against the realm's JWKS."""
import base64
import concurrent.futures
import json
import re
import sqlite3
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import KeycloakPeer, RunningServer, TaskServer, curl_response, free_port
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_graphql import post

# The provider announces 32 s lifetimes; Foyer refreshes within 30 s of expiry, so 2 s after sign-in it must.
ANNOUNCED_LIFETIME = 32
# The public client an AppAuth app registers (peers/keycloak_adapter.py).
APP_CLIENT_ID = "showcase-app"
APP_REDIRECT_URI = "http://127.0.0.1/showcase-app/callback"


@pytest.fixture(scope="module")
def foyer_port():
    """Chosen before the realm starts: Foyer's callback must be a registered redirect URI there."""
    return free_port()


@pytest.fixture(scope="module")
def realm(tmp_path_factory, foyer_port):
    peer = KeycloakPeer(
        tmp_path_factory.mktemp("oidc"), expires_in=ANNOUNCED_LIFETIME,
        redirect_uris=[f"http://127.0.0.1:{foyer_port}/sign_in/keycloak/callback"],
    )
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def guarded_task_server(tmp_path_factory, realm, foyer_port):
    """Only a valid token of the realm gets through: a task page works only if Foyer relays one. Tokens an app got
    through Foyer's /realms/… proxy name Foyer as their issuer, and this server trusts that way in too."""
    peer = TaskServer(tmp_path_factory.mktemp("guarded-tasks"), token=None, extra_env={
        "TASK_SERVER_JWKS_URL": realm.issuer + "/protocol/openid-connect/certs",
        "TASK_SERVER_ISSUER": f"{realm.issuer},http://127.0.0.1:{foyer_port}/realms/{realm.realm}",
    })
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def foyer(tmp_path_factory, realm, guarded_task_server, foyer_port):
    running = RunningServer(
        tmp_path_factory.mktemp("foyer-keycloak"), extra_env={"FOYER_KEYCLOAK_CLIENT_SECRET": realm.client_secret},
        extra_args=[*realm.foyer_args(), "--graphql-url", guarded_task_server.url, "--keycloak-audience", f"{realm.client_id},{APP_CLIENT_ID}"],
        port=foyer_port,
    )
    yield running
    running.stop()


def curl_sign_in(foyer, username: str, password: str) -> tuple[int, dict, str]:
    return curl_response(foyer.url + "/api/v1/sessions", "-H", "Content-Type: application/json",
                         "--data", json.dumps({"username": username, "password": password}))


def sign_in(foyer, username="ada", password="ada password") -> str:
    status, headers, body = curl_sign_in(foyer, username, password)
    assert status == 201, body
    return headers["x-session-token"]


def get(foyer, path: str, token: str) -> tuple[int, bytes]:
    request = urllib.request.Request(foyer.url + path, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def stored_tokens(foyer) -> list[tuple[str, str]]:
    """(access, refresh) tokens Foyer keeps, newest session last: read from its database, as an operator could."""
    with sqlite3.connect(foyer.database) as db:
        return db.execute(
            "SELECT access_token, refresh_token FROM keycloak_tokens JOIN sessions ON sessions.id = session_id ORDER BY sessions.created_at"
        ).fetchall()


def provider_logout(realm, refresh_token: str) -> int:
    credentials = base64.b64encode(f"{realm.client_id}:{realm.client_secret}".encode()).decode()
    request = urllib.request.Request(
        realm.issuer + "/protocol/openid-connect/logout", data=urllib.parse.urlencode({"refresh_token": refresh_token}).encode(),
        headers={"Authorization": f"Basic {credentials}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def provider_refresh(realm, refresh_token: str) -> tuple[int, dict]:
    credentials = base64.b64encode(f"{realm.client_id}:{realm.client_secret}".encode()).decode()
    request = urllib.request.Request(
        realm.issuer + "/protocol/openid-connect/token",
        data=urllib.parse.urlencode({"grant_type": "refresh_token", "refresh_token": refresh_token}).encode(),
        headers={"Authorization": f"Basic {credentials}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_native_sign_in_with_curl_goes_to_the_realm_and_keeps_its_tokens_server_side(foyer):
    status, headers, body = curl_sign_in(foyer, "ada", "ada password")
    assert status == 201, body
    token = headers["x-session-token"]
    assert headers["set-cookie"].startswith("foyer_session=" + token)
    assert "eyJ" not in body and not any("eyJ" in value for value in headers.values()), "no Keycloak token leaves Foyer"
    assert json.loads(body)["user"]["email"] == "ada@example.org"
    status, me = get(foyer, "/api/v1/me", token)
    assert status == 200 and json.loads(me)["email"] == "ada@example.org"

    status, headers, body = curl_sign_in(foyer, "ada", "not her password")
    assert status == 401
    assert json.loads(body)["error"] == "That email or password is incorrect"
    assert headers["www-authenticate"] == "Bearer"


def test_task_pages_work_because_the_users_own_token_is_relayed(foyer, guarded_task_server):
    status, _ = post(guarded_task_server.url, {"query": "{ allTasks { id } }"}, token=None)
    assert status == 403, "the task server refuses callers without a realm token"

    ada, bob = sign_in(foyer), sign_in(foyer, "bob", "bob password")
    status, body = post(foyer.url + "/graphql", {"query": 'mutation { createTask(title: "Relayed", description: "d") { id } }'}, ada)
    assert status == 200, body
    for token in (ada, bob):
        status, body = get(foyer, "/tasks.json", token)
        assert status == 200, body
        assert any(task["title"] == "Relayed" for task in json.loads(body))


def test_an_expiring_token_is_refreshed_once_for_many_parallel_requests(foyer, realm):
    token = sign_in(foyer)
    access_before, refresh_before = stored_tokens(foyer)[-1]
    time.sleep(ANNOUNCED_LIFETIME - 30 + 0.5)
    # The provider rotates refresh tokens: a second refresh with the same one would fail and end the session.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = [status for status, _ in pool.map(lambda _: get(foyer, "/tasks.json", token), range(8))]
    assert statuses == [200] * 8
    access_after, refresh_after = stored_tokens(foyer)[-1]
    assert access_after != access_before and refresh_after != refresh_before
    assert provider_refresh(realm, refresh_before)[0] == 400, "the old refresh token was used up, once"


def test_a_refresh_keycloak_refuses_ends_the_session(foyer, realm):
    token = sign_in(foyer)
    _, refresh_token = stored_tokens(foyer)[-1]
    assert provider_logout(realm, refresh_token) == 204
    time.sleep(ANNOUNCED_LIFETIME - 30 + 0.5)
    status, body = get(foyer, "/tasks.json", token)
    assert status == 401, body
    assert get(foyer, "/api/v1/me", token)[0] == 401, "the Foyer session is over too"


def test_signing_out_logs_out_at_keycloak(foyer, realm):
    token = sign_in(foyer)
    _, refresh_token = stored_tokens(foyer)[-1]
    request = urllib.request.Request(foyer.url + "/api/v1/sessions/current", method="DELETE", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 204
    status, error = provider_refresh(realm, refresh_token)
    assert status == 400 and error["error"] == "invalid_grant"


def test_an_unreachable_realm_is_a_503_not_a_wrong_password(tmp_path):
    foyer = RunningServer(tmp_path, extra_env={"FOYER_KEYCLOAK_CLIENT_SECRET": "s"}, extra_args=[
        "--keycloak-url", f"http://127.0.0.1:{free_port()}", "--keycloak-realm", "showcase", "--keycloak-client-id", "foyer",
    ])
    try:
        status, _, body = curl_sign_in(foyer, "ada", "ada password")
        assert status == 503
        assert "Keycloak cannot be reached" in json.loads(body)["error"]
    finally:
        foyer.stop()


# --- Apps that sign in with Keycloak themselves (AppAuth) and call Foyer with the access token ---

def provider_password_grant(realm, username: str, password: str) -> dict:
    """Tokens straight from the realm, as an app signing in on its own gets them."""
    credentials = base64.b64encode(f"{realm.client_id}:{realm.client_secret}".encode()).decode()
    request = urllib.request.Request(
        realm.issuer + "/protocol/openid-connect/token",
        data=urllib.parse.urlencode({"grant_type": "password", "username": username, "password": password, "scope": "openid"}).encode(),
        headers={"Authorization": f"Basic {credentials}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def send(foyer, method: str, path: str, token: str, data: bytes | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(foyer.url + path, method=method, data=data, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_an_apps_own_access_token_is_a_bearer_credential_and_is_relayed(foyer, realm, guarded_task_server):
    access = provider_password_grant(realm, "bob", "bob password")["access_token"]
    status, body = get(foyer, "/api/v1/me", access)
    assert status == 200, body
    assert json.loads(body)["email"] == "bob@example.org"  # not in nanoidp's tokens: Foyer asked userinfo once
    # The guarded task server answers only a valid realm token: Foyer relays the app's own.
    status, body = get(foyer, "/tasks.json", access)
    assert status == 200, body
    status, body = post(foyer.url + "/graphql", {"query": "{ allTasks { id title } }"}, access)
    assert status == 200 and "errors" not in json.loads(body), body
    # No Foyer session stands behind it, and none was made.
    status, _, body = send(foyer, "DELETE", "/api/v1/sessions/current", access)
    assert status == 404 and b"Keycloak access token" in body


def test_realm_roles_decide_who_may_delete_a_task(foyer, realm):
    bob = provider_password_grant(realm, "bob", "bob password")["access_token"]
    ada = provider_password_grant(realm, "ada", "ada password")["access_token"]
    _, created = post(foyer.url + "/graphql", {"query": 'mutation { createTask(title: "Roles", description: "who deletes") { id } }'}, bob)
    task_id = json.loads(created)["data"]["createTask"]["id"]
    status, _, body = send(foyer, "DELETE", f"/tasks/{task_id}", bob)
    assert status == 403 and b"admin" in body
    page = send(foyer, "GET", f"/tasks/{task_id}", bob)[2].decode()
    assert "Delete</button>" not in page
    assert "Delete</button>" in send(foyer, "GET", f"/tasks/{task_id}", ada)[2].decode()
    status, headers, _ = send(foyer, "DELETE", f"/tasks/{task_id}", ada)
    assert (status, headers["Location"]) == (303, "/tasks")
    assert get(foyer, f"/tasks/{task_id}", ada)[0] == 404


def realm_signed(realm, claims: dict, header: dict | None = None) -> str:
    """A token signed with the realm's own private key (read from the provider's key directory)."""
    import jwt
    key = (realm.keys_dir / "rsa_private.pem").read_bytes()
    kid = (realm.keys_dir / "kid.txt").read_text().strip()
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid, **(header or {})})


def valid_claims(realm, **changes) -> dict:
    now = int(time.time())
    claims = {"iss": realm.issuer, "sub": "bob", "aud": realm.client_id, "iat": now, "exp": now + 300, "token_use": "access"}
    claims.update(changes)
    return claims


def forged_tokens(realm) -> dict[str, str]:
    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    kid = (realm.keys_dir / "kid.txt").read_text().strip()
    public_pem = (realm.keys_dir / "rsa_public.pem").read_bytes()
    unsigned = lambda header, claims: ".".join(
        base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode() for part in (header, claims)) + "."
    return {
        "expired": realm_signed(realm, valid_claims(realm, iat=int(time.time()) - 600, exp=int(time.time()) - 300)),
        "wrong issuer": realm_signed(realm, valid_claims(realm, iss="http://127.0.0.1:1/realms/elsewhere")),
        "other audience": realm_signed(realm, valid_claims(realm, aud="someone-else")),
        "an ID token": realm_signed(realm, valid_claims(realm, token_use="id")),
        "alg none": unsigned({"alg": "none", "kid": kid, "typ": "JWT"}, valid_claims(realm)),
        "forged signature": jwt.encode(valid_claims(realm), other_key, algorithm="RS256", headers={"kid": kid}),
        "unknown key": jwt.encode(valid_claims(realm), other_key, algorithm="RS256", headers={"kid": "not-the-realms"}),
        # The classic confusion attack: HMAC keyed with the realm's public key.
        "HS256 with the public key": unsigned({"alg": "HS256", "kid": kid, "typ": "JWT"}, valid_claims(realm)) + "c2lnbmF0dXJl",
        "tampered payload": (lambda good: good.split(".")[0] + "." + base64.urlsafe_b64encode(json.dumps(valid_claims(realm, sub="ada")).encode()).rstrip(b"=").decode() + "." + good.split(".")[2])(
            realm_signed(realm, valid_claims(realm))),
        "garbage": "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.AAAA",
    }


def test_forged_expired_and_foreign_tokens_are_refused(foyer, realm):
    # The realm's key does make a valid token: the refusals below are about the tokens, not the test's signing.
    assert get(foyer, "/api/v1/me", realm_signed(realm, valid_claims(realm)))[0] == 200
    reasons = {
        "expired": "expired", "wrong issuer": "not by this realm", "other audience": "not for Foyer",
        "an ID token": "not an access token", "alg none": "signed with none", "forged signature": "signature does not verify",
        "unknown key": "key the realm does not publish", "HS256 with the public key": "signed with HS256",
        "tampered payload": "signature does not verify", "garbage": "names no signing key",
    }
    for name, token in forged_tokens(realm).items():
        status, headers, body = send(foyer, "GET", "/api/v1/me", token)
        assert status == 401, (name, body)
        assert 'error="invalid_token"' in headers.get("WWW-Authenticate", ""), (name, headers)
        assert reasons[name] in json.loads(body)["error"], (name, body)
        # Not even a page that needs no sign-in is served with a bad token.
        assert send(foyer, "GET", "/", token)[0] == 401, name


# --- Browsers: authorization code flow with PKCE, in real Chromium, through the provider's own login form ---

def start_browser_sign_in(page, foyer, path="/tasks/new"):
    """From a page that needs a sign-in to the realm's login form; returns the state Foyer sent along."""
    assert page.goto(foyer.url + path).status == 401
    page.click("#keycloak-sign-in")
    page.wait_for_url(re.compile(r".*/realms/showcase/protocol/openid-connect/auth\?.*"))
    query = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
    assert query["code_challenge_method"] == ["S256"] and query["nonce"][0] and "code_verifier" not in query
    return query["state"][0]


def test_browser_signs_in_on_the_realms_login_page_and_lands_where_it_started(foyer, realm, browser):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    start_browser_sign_in(page, foyer)
    page.fill("#username", "bob")
    page.fill("#password", "bob password")
    page.click("button[type=submit]")
    page.wait_for_url(foyer.url + "/tasks/new")
    page.locator("input[name=title]").wait_for()
    # The task list comes from the guarded task server: Foyer relays bob's Keycloak token for this browser.
    page.fill("input[name=title]", "Signed in with Keycloak")
    page.fill("textarea[name=description]", "code flow + PKCE")
    page.click("main button[type=submit]")
    page.locator("article.task h1", has_text="Signed in with Keycloak").wait_for()
    # The browser holds Foyer's opaque session cookie; Keycloak's tokens stay in Foyer's database.
    cookies = {cookie["name"]: cookie["value"] for cookie in context.cookies(foyer.url)}
    access, refresh = stored_tokens(foyer)[-1]
    assert "foyer_session" in cookies and cookies["foyer_session"].count(".") == 0
    assert not any(access in value or refresh in value for value in cookies.values())
    page.goto(foyer.url + "/account")
    assert "bob@example.org" in page.locator("main").inner_text()
    claims = dict(zip(page.locator("#keycloak-claims dt").all_inner_texts(), page.locator("#keycloak-claims dd").all_inner_texts()))
    assert claims["sub"] == "bob" and claims["iss"] == realm.issuer and claims["aud"] == "foyer"
    assert re.match(r"\d{4}-\d\d-\d\d", claims["exp"]), claims  # a time a person can read, not seconds since 1970
    context.close()


def test_a_denied_or_replayed_sign_in_ends_on_a_clear_page(foyer, browser):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    # Keycloak sends the user back with error=access_denied (they declined, or an admin forbade the client).
    state = start_browser_sign_in(page, foyer)
    response = page.goto(f"{foyer.url}/sign_in/keycloak/callback?error=access_denied&error_description=User+declined&state={state}")
    assert response.status == 403
    assert "access denied: User declined" in page.locator(".flash").inner_text()
    # The same state again: single use.
    response = page.goto(f"{foyer.url}/sign_in/keycloak/callback?code=whatever&state={state}")
    assert response.status == 400 and "Sign in again" in page.locator(".flash").inner_text()
    # A code Keycloak does not know (expired, used, or made up), with a state that is good.
    state = start_browser_sign_in(page, foyer)
    response = page.goto(f"{foyer.url}/sign_in/keycloak/callback?code=not-a-real-code&state={state}")
    assert response.status == 400 and "no longer accepts this sign-in" in page.locator(".flash").inner_text()
    context.close()


def test_a_callback_from_another_browser_is_refused(foyer, browser):  # noqa: F811
    """Login CSRF: an attacker's own code and state, fed to a victim's browser, must not sign the victim in."""
    attacker = browser.new_context()
    page = attacker.new_page()
    state = start_browser_sign_in(page, foyer)
    captured = []

    def keep_the_callback(route):
        """The attacker signs in, but stops before their browser follows the redirect to Foyer's callback."""
        if route.request.method != "POST":
            return route.continue_()
        captured.append(route.fetch(max_redirects=0).headers["location"])
        route.abort()

    page.route(re.compile(r".*/protocol/openid-connect/auth.*"), keep_the_callback)
    page.fill("#username", "bob")
    page.fill("#password", "bob password")
    page.click("button[type=submit]")
    for _ in range(50):
        if captured:
            break
        page.wait_for_timeout(100)
    assert captured and f"state={state}" in captured[0] and "code=" in captured[0]
    page.unroute_all()
    victim = browser.new_context()
    response = victim.new_page().goto(captured[0])
    assert response.status == 400
    assert "foyer_session" not in {cookie["name"] for cookie in victim.cookies(foyer.url)}
    victim.close()
    # The code itself was good: in the browser that started the sign-in it still works.
    page.goto(captured[0])
    page.wait_for_url(foyer.url + "/tasks/new")
    assert "foyer_session" in {cookie["name"] for cookie in attacker.cookies(foyer.url)}
    attacker.close()


# --- Apps that can reach only Foyer: AppAuth against Foyer's /realms/… proxy ---

@pytest.mark.parametrize("base", ["", "/auth"], ids=["new Keycloak paths", "old /auth paths"])
def test_python_keycloak_through_the_proxy_gets_tokens_foyer_accepts(foyer, base):
    import jwt
    from keycloak import KeycloakOpenID
    app = KeycloakOpenID(server_url=foyer.url + base, realm_name="showcase", client_id=APP_CLIENT_ID)
    discovery = app.well_known()
    # Keycloak heard X-Forwarded-*: the app is sent to Foyer for everything, and the issuer names Foyer.
    assert discovery["issuer"] == f"{foyer.url}/realms/showcase"
    for endpoint in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri", "end_session_endpoint"):
        assert discovery[endpoint].startswith(foyer.url + "/realms/showcase/"), endpoint
    tokens = app.token("ada", "ada password")
    assert jwt.decode(tokens["access_token"], options={"verify_signature": False})["iss"] == discovery["issuer"]
    assert app.userinfo(tokens["access_token"])["email"] == "ada@example.org"
    assert [key["kid"] for key in app.certs()["keys"]]
    # Those tokens are good Bearer credentials at Foyer, and are relayed to the guarded task server.
    status, body = get(foyer, "/api/v1/me", tokens["access_token"])
    assert status == 200 and json.loads(body)["email"] == "ada@example.org"
    status, body = post(foyer.url + "/graphql", {"query": "{ allTasks { id } }"}, tokens["access_token"])
    assert status == 200 and "errors" not in json.loads(body), body
    refreshed = app.refresh_token(tokens["refresh_token"])
    assert get(foyer, "/api/v1/me", refreshed["access_token"])[0] == 200
    app.logout(refreshed["refresh_token"])
    # Logged out: the provider refuses that refresh token (invalid_grant), as Keycloak does.
    from keycloak.exceptions import KeycloakPostError
    with pytest.raises(KeycloakPostError) as refused:
        app.refresh_token(refreshed["refresh_token"])
    assert refused.value.response_code == 400 and b"invalid_grant" in refused.value.response_body, refused.value


def test_the_login_page_and_the_code_exchange_work_through_the_proxy(foyer):
    """AppAuth's authorization request in a browser-like client: the provider's page, its cookies and its redirect
    all pass through Foyer; then code + PKCE verifier become tokens Foyer accepts."""
    import hashlib
    import secrets

    import requests
    from keycloak import KeycloakOpenID
    app = KeycloakOpenID(server_url=foyer.url, realm_name="showcase", client_id=APP_CLIENT_ID)
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    url = app.auth_url(APP_REDIRECT_URI, scope="openid", state="app-state", code_challenge=challenge, code_challenge_method="S256")
    assert url.startswith(foyer.url + "/realms/showcase/")
    webview = requests.Session()
    page = webview.get(url, timeout=30)
    assert page.status_code == 200 and 'name="password"' in page.text
    # The provider's page is the provider's: it loads scripts from a CDN, which Foyer's page policy (scripts from
    # Foyer only) would block in a real WebView. Headers of Foyer's own it lacks are still added.
    assert '<script src="https://' in page.text and "script-src 'self'" not in page.headers.get("Content-Security-Policy", "")
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    transaction = re.search(r'name="transaction_id" value="([^"]+)"', page.text).group(1)
    answer = webview.post(page.url, data={"transaction_id": transaction, "username": "bob", "password": "bob password"},
                          allow_redirects=False, timeout=30)
    assert answer.status_code in (302, 303), answer.text[:500]
    location = urllib.parse.urlparse(answer.headers["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == APP_REDIRECT_URI
    query = urllib.parse.parse_qs(location.query)
    assert query["state"] == ["app-state"]
    tokens = app.token(grant_type="authorization_code", code=query["code"][0], redirect_uri=APP_REDIRECT_URI, code_verifier=verifier)
    status, body = get(foyer, "/api/v1/me", tokens["access_token"])
    assert status == 200 and json.loads(body)["email"] == "bob@example.org"


def test_the_proxy_keeps_foyers_cookies_and_other_realms_to_itself(foyer, realm):
    token = sign_in(foyer, "bob", "bob password")
    # The adapter echoes nothing, so look at what arrives: a realm path other than ours is Foyer's 404, not Keycloak's.
    request = urllib.request.Request(foyer.url + "/realms/master/.well-known/openid-configuration", headers={"Accept": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 404
    # A browser signed in to Foyer posting to Keycloak through the proxy is not stopped by Foyer's CSRF check,
    # and Foyer's session cookie does not travel on to Keycloak (the token endpoint would not care, the log would).
    form = urllib.parse.urlencode({"grant_type": "password", "client_id": APP_CLIENT_ID, "username": "bob", "password": "bob password"}).encode()
    request = urllib.request.Request(foyer.url + "/realms/showcase/protocol/openid-connect/token", data=form,
                                     headers={"Cookie": f"foyer_session={token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200 and "access_token" in json.load(response)


def test_live_task_pages_follow_a_guarded_upstream_with_a_client_credentials_token(foyer, realm, guarded_task_server):
    """The upstream task feed is Foyer's own, not a user's: it signs in to the JWKS-guarded upstream with a token
    from the client credentials grant, and a task an app creates there directly reaches open task pages."""
    from test_live import RawStream, stream_path

    token = sign_in(foyer)
    status, page = get(foyer, "/tasks", token)
    assert status == 200, page
    stream = RawStream(foyer, stream_path(page.decode()), [f"Authorization: Bearer {token}"])
    stream.read_until(b": tasks\n\n")
    app_token = provider_password_grant(realm, "bob", "bob password")["access_token"]
    title = "Made by an app at the guarded upstream"
    status, body = post(guarded_task_server.url, {"query": f'mutation {{ createTask(title: "{title}", description: "d") {{ id }} }}'}, app_token)
    assert status == 200 and "errors" not in json.loads(body), body
    assert title.encode() in stream.read_until(b"</turbo-stream>\n\n", 10)
    stream.close()


# --- Keycloak ends sessions: back-channel logout (OIDC Back-Channel Logout 1.0) and RP-initiated logout ---

BACKCHANNEL_EVENT = "http://schemas.openid.net/event/backchannel-logout"


def logout_token(realm, **changes) -> str:
    """A logout token as Keycloak posts it, signed with the realm's real key; a claim set to None is left out."""
    now = int(time.time())
    claims = {"iss": realm.issuer, "aud": realm.client_id, "iat": now, "exp": now + 120, "jti": f"logout-{time.monotonic_ns()}",
              "events": {BACKCHANNEL_EVENT: {}}}
    claims.update(changes)
    return realm_signed(realm, {name: value for name, value in claims.items() if value is not None}, header={"typ": "logout+jwt"})


def back_channel_logout(foyer, body: bytes, content_type="application/x-www-form-urlencoded") -> tuple[int, dict]:
    request = urllib.request.Request(foyer.url + "/sign_in/keycloak/backchannel_logout", data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_keycloak_ends_foyer_sessions_over_the_back_channel(foyer, realm):
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    bob_phone, bob_laptop, ada = sign_in(foyer, "bob", "bob password"), sign_in(foyer, "bob", "bob password"), sign_in(foyer)
    now = int(time.time())
    kid = (realm.keys_dir / "kid.txt").read_text().strip()
    forged_claims = {"iss": realm.issuer, "aud": realm.client_id, "iat": now, "sub": "bob", "events": {BACKCHANNEL_EVENT: {}}}
    refused = {
        "forged": jwt.encode(forged_claims, rsa.generate_private_key(public_exponent=65537, key_size=2048), algorithm="RS256", headers={"kid": kid}),
        "alg none": ".".join(base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode()
                             for part in ({"alg": "none", "kid": kid}, forged_claims)) + ".",
        "expired": logout_token(realm, sub="bob", iat=now - 900, exp=now - 600),
        "issued long ago": logout_token(realm, sub="bob", iat=now - 900, exp=None),
        "wrong audience": logout_token(realm, sub="bob", aud="someone-else"),
        "wrong issuer": logout_token(realm, sub="bob", iss="http://127.0.0.1:1/realms/elsewhere"),
        "with a nonce": logout_token(realm, sub="bob", nonce="an ID token's"),
        "no logout event": logout_token(realm, sub="bob", events={"http://schemas.openid.net/event/other": {}}),
        "neither sid nor sub": logout_token(realm),
    }
    for name, token in refused.items():
        status, body = back_channel_logout(foyer, urllib.parse.urlencode({"logout_token": token}).encode())
        assert status == 400 and body["error"] == "invalid_request" and body["error_description"], (name, body)
    for body, content_type in [(b"", "application/x-www-form-urlencoded"), (b'{"logout_token": "x"}', "application/json")]:
        assert back_channel_logout(foyer, body, content_type)[0] == 400
    assert get(foyer, "/api/v1/me", bob_phone)[0] == 200, "no refused token ended anything"

    # No sid: every Foyer session of that subject ends, and only those.
    status, body = back_channel_logout(foyer, urllib.parse.urlencode({"logout_token": logout_token(realm, sub="bob")}).encode())
    # (Earlier tests of this module left sessions of bob's too: at least these two.)
    assert status == 200 and body["sessions_ended"] >= 2, body
    assert get(foyer, "/api/v1/me", bob_phone)[0] == 401 and get(foyer, "/api/v1/me", bob_laptop)[0] == 401
    assert get(foyer, "/api/v1/me", ada)[0] == 200

    # A sid: only the sessions opened with that realm session. (nanoidp writes no `sid` into its ID tokens, so the
    # test gives one of ada's sessions the one Keycloak's ID token would have carried, in Foyer's database.)
    ada_elsewhere = sign_in(foyer)
    with sqlite3.connect(foyer.database) as db:
        db.execute("UPDATE keycloak_tokens SET keycloak_session_id = 'realm-session-42' WHERE session_id = "
                   "(SELECT id FROM sessions ORDER BY created_at DESC LIMIT 1)")
    status, body = back_channel_logout(foyer, urllib.parse.urlencode({"logout_token": logout_token(realm, sid="realm-session-42")}).encode())
    assert (status, body["sessions_ended"]) == (200, 1), body
    assert get(foyer, "/api/v1/me", ada_elsewhere)[0] == 401
    assert get(foyer, "/api/v1/me", ada)[0] == 200


def test_signing_out_a_keycloak_browser_ends_the_realms_browser_session_too(foyer, realm, browser):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    start_browser_sign_in(page, foyer, "/account")
    page.fill("#username", "bob")
    page.fill("#password", "bob password")
    page.click("button[type=submit]")
    page.wait_for_url(foyer.url + "/account")
    visited = []
    page.on("request", lambda request: visited.append(request.url) if request.is_navigation_request() else None)
    page.click("nav button:has-text('Sign out')")
    page.wait_for_url(foyer.url + "/")
    end_session = [url for url in visited if url.startswith(realm.issuer + "/protocol/openid-connect/logout")]
    assert end_session, visited
    query = urllib.parse.parse_qs(urllib.parse.urlparse(end_session[0]).query)
    assert query["client_id"] == ["foyer"] and query["post_logout_redirect_uri"] == [foyer.url + "/"]
    assert jwt_payload(query["id_token_hint"][0])["sub"] == "bob"
    assert page.goto(foyer.url + "/account").status == 401
    # The realm forgot the browser too: "Sign in with Keycloak" asks for the password again.
    start_browser_sign_in(page, foyer, "/account")
    page.locator("#password").wait_for()
    context.close()


def jwt_payload(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
