"""Native sessions a stolen token cannot replay. An app's ID token is traded for a session once (on any instance
sharing the database) and only while fresh; a sign-in carrying a DPoP proof (RFC 9449) binds the session to the app's
key, so its token is worthless without a fresh proof from that key. Two Foyer instances on one PostgreSQL, nanoidp as
the provider, and a DPoP client written from the RFC (dpop_client.py)."""
import asyncio
import concurrent.futures
import hashlib
import hmac
import json
import time

import pytest
import requests
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from conftest import DEMO_EMAIL, DEMO_PASSWORD, OIDCProviderPeer, RunningServer
from dpop_client import DeviceKey, b64url
from test_instances import fresh_database
from test_oidc_providers import app_tokens_from_nanoidp, claims_of, nanoidp_signed


@pytest.fixture(scope="module")
def nanoidp(tmp_path_factory):
    peer = OIDCProviderPeer("nanoidp_provider.py", tmp_path_factory.mktemp("nanoidp"), "")
    peer.keys_dir = peer.workdir / "nanoidp-root" / "keys"
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def pair(tmp_path_factory, nanoidp):
    """Two instances on one database; the second takes ID tokens up to 5 minutes old instead of 10."""
    database = fresh_database()
    args = ["--oidc-issuer", nanoidp.issuer, "--oidc-client-id", nanoidp.client_id, "--oidc-name", "NanoIDP",
            "--oidc-app-client-ids", nanoidp.app_client_id]
    env = {"FOYER_OIDC_CLIENT_SECRET": nanoidp.client_secret}
    a = RunningServer(tmp_path_factory.mktemp("dpop-a"), database=database, extra_env=env, extra_args=args)
    b = RunningServer(tmp_path_factory.mktemp("dpop-b"), database=database, extra_env=env,
                      extra_args=[*args, "--oidc-id-token-max-age", "5m"])
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="module")
def foyer(pair):
    return pair[0]


def id_token_sign_in(server, id_token: str, nonce: str | None = None, proof: str | None = None):
    body = {"provider": "nanoidp", "id_token": id_token, **({"nonce": nonce} if nonce else {})}
    headers = {"Accept": "application/json", **({"DPoP": proof} if proof else {})}
    return requests.post(server.url + "/api/v1/sessions", json=body, headers=headers, timeout=30)


def password_sign_in(server, key: DeviceKey | None = None):
    url = server.url + "/api/v1/sessions"
    headers = {"Accept": "application/json", **({"DPoP": key.proof("POST", url)} if key else {})}
    return requests.post(url, json={"email": DEMO_EMAIL, "password": DEMO_PASSWORD}, headers=headers, timeout=30)


def bound_session(server, key: DeviceKey) -> requests.Response:
    answer = password_sign_in(server, key)
    assert answer.status_code == 201, answer.text
    return answer


def unsigned(header: dict, claims: dict) -> str:
    return ".".join(b64url(json.dumps(part).encode()) for part in (header, claims))


def refused(answer, error: str, words: str):
    assert answer.status_code == 401, (answer.status_code, answer.text)
    challenge = answer.headers["WWW-Authenticate"]
    assert challenge.startswith("DPoP ") and f'error="{error}"' in challenge and 'algs="ES256' in challenge, challenge
    assert answer.json()["error"] == error and words in answer.json()["error_description"], answer.json()


# --- An ID token is traded for a session once, and only while fresh ---

def test_an_id_token_makes_one_session_and_a_second_use_is_refused_on_either_instance(pair, nanoidp):
    a, b = pair
    first = app_tokens_from_nanoidp(nanoidp, "finn")["id_token"]
    assert id_token_sign_in(a, first).status_code == 201
    for server in (a, b):
        again = id_token_sign_in(server, first)
        assert again.status_code == 401, again.text
        assert again.json()["error"] == "invalid_token" and "already used" in again.json()["error_description"]
        assert again.headers["WWW-Authenticate"].startswith('Bearer error="invalid_token"')
    # Used first on the other instance: the same.
    second = app_tokens_from_nanoidp(nanoidp, "finn")["id_token"]
    assert id_token_sign_in(b, second).status_code == 201
    assert id_token_sign_in(a, second).status_code == 401


def test_a_nonce_is_single_use_too(foyer, nanoidp):
    nonce = b64url(b"one nonce, two sign-ins")
    first = app_tokens_from_nanoidp(nanoidp, "erin", nonce=nonce)["id_token"]
    second = app_tokens_from_nanoidp(nanoidp, "erin", nonce=nonce)["id_token"]
    assert first != second
    assert id_token_sign_in(foyer, first, nonce=nonce).status_code == 201
    answer = id_token_sign_in(foyer, second, nonce=nonce)
    assert answer.status_code == 401 and "nonce was already used" in answer.json()["error_description"], answer.text


def test_an_id_token_older_than_the_maximum_age_is_refused_on_both_sides_of_it(pair, nanoidp):
    a, b = pair
    good = app_tokens_from_nanoidp(nanoidp, "finn")["id_token"]
    now = int(time.time())
    aged = lambda age: nanoidp_signed(nanoidp, {**claims_of(good), "iat": now - age, "exp": now + 600, "jti": f"aged-{age}-{now}"})  # noqa: E731
    assert id_token_sign_in(a, aged(560)).status_code == 201, "inside the default 10 minutes"
    old = id_token_sign_in(a, aged(640))
    assert old.status_code == 401 and "at most 600 s old" in old.json()["error_description"], old.text
    assert id_token_sign_in(b, aged(280)).status_code == 201, "inside --oidc-id-token-max-age 5m"
    answer = id_token_sign_in(b, aged(320))
    assert answer.status_code == 401 and "at most 300 s old" in answer.json()["error_description"], answer.text


# --- A sign-in with a DPoP proof binds the session to the app's key ---

def test_a_bound_session_works_with_a_proof_on_each_method_and_hands_its_webview_a_cookie_of_its_own(foyer):
    key = DeviceKey()
    answer = bound_session(foyer, key)
    token = answer.headers["X-Session-Token"]
    assert answer.json()["token_type"] == "DPoP"
    sign_in_cookie = answer.cookies["foyer_session"]
    assert sign_in_cookie and sign_in_cookie != token, "the WebView never holds the app's own token"

    me = foyer.url + "/api/v1/me"
    assert requests.get(me, headers=key.headers("GET", me, token), timeout=30).json()["email"] == DEMO_EMAIL
    posts = foyer.url + "/api/v1/posts"
    created = requests.post(posts, json={"title": "From a bound app", "content": "signed"}, headers=key.headers("POST", posts, token), timeout=30)
    assert created.status_code == 201, created.text
    post = f"{posts}/{created.json()['id']}"
    assert requests.delete(post, headers=key.headers("DELETE", post, token), timeout=30).status_code == 204

    handover = foyer.url + "/api/v1/session/cookie"
    answer = requests.get(handover, headers=key.headers("GET", handover, token), timeout=30)
    assert answer.status_code == 204, answer.text
    webview_cookie = answer.cookies["foyer_session"]
    assert webview_cookie not in (token, sign_in_cookie)
    webview = requests.Session()
    webview.cookies.set("foyer_session", webview_cookie)
    assert webview.get(me, headers={"Accept": "application/json"}, timeout=30).json()["email"] == DEMO_EMAIL
    account = webview.get(foyer.url + "/account", timeout=30)
    assert account.status_code == 200 and "Bound to a device key" in account.text, account.text[:2000]
    # The hand-over before is replaced; each token works only the way it was given out.
    stale = requests.get(me, cookies={"foyer_session": sign_in_cookie}, headers={"Accept": "application/json"}, timeout=30)
    assert stale.status_code == 401
    as_cookie = requests.get(me, cookies={"foyer_session": token}, headers={"Accept": "application/json"}, timeout=30)
    assert as_cookie.status_code == 401, "the app's token is no cookie"
    assert requests.get(me, headers={"Authorization": f"Bearer {webview_cookie}", "Accept": "application/json"}, timeout=30).status_code == 401


def test_a_bound_token_is_refused_without_a_good_proof_for_each_reason(foyer):
    key = DeviceKey()
    token = bound_session(foyer, key).headers["X-Session-Token"]
    me = foyer.url + "/api/v1/me"
    get = lambda headers: requests.get(me, headers={"Accept": "application/json", **headers}, timeout=30)  # noqa: E731
    now = int(time.time())

    refused(get({"Authorization": f"Bearer {token}"}), "invalid_token", "send its token as Authorization: DPoP")
    refused(get({"Authorization": f"DPoP {token}"}), "invalid_dpop_proof", "needs a DPoP proof")
    used = key.proof("GET", me, token)
    assert get({"Authorization": f"DPoP {token}", "DPoP": used}).status_code == 200
    refused(get({"Authorization": f"DPoP {token}", "DPoP": used}), "invalid_dpop_proof", "jti was used before")
    refused(get({"Authorization": f"DPoP {token}", "DPoP": DeviceKey().proof("GET", me, token)}), "invalid_dpop_proof", "another key")
    refused(get({"Authorization": f"DPoP {token}", "DPoP": key.proof("GET", foyer.url + "/api/v1/sessions", token)}), "invalid_dpop_proof", "(htu)")
    refused(get({"Authorization": f"DPoP {token}", "DPoP": key.proof("POST", me, token)}), "invalid_dpop_proof", "(htm)")
    refused(get({"Authorization": f"DPoP {token}", "DPoP": key.proof("GET", me, token, iat=now - 300)}), "invalid_dpop_proof", "good for 60 s")
    refused(get({"Authorization": f"DPoP {token}", "DPoP": key.proof("GET", me, token, iat=now + 300)}), "invalid_dpop_proof", "from now")
    refused(get({"Authorization": f"DPoP {token}", "DPoP": key.proof("GET", me)}), "invalid_dpop_proof", "no ath")
    refused(get({"Authorization": f"DPoP {token}", "DPoP": key.proof("GET", me, "another token")}), "invalid_dpop_proof", "ath is the hash of another token")
    refused(get({"Authorization": f"DPoP {token}", "DPoP": key.proof("GET", me, token, header={"typ": "JWT"})}), "invalid_dpop_proof", "not dpop+jwt")
    # alg none, and HS256 with the public key as the secret: the forgeries asymmetric-only checks exist for.
    claims = claims_of(key.proof("GET", me, token))
    none = unsigned({"typ": "dpop+jwt", "alg": "none", "jwk": key.jwk}, claims) + "."
    refused(get({"Authorization": f"DPoP {token}", "DPoP": none}), "invalid_dpop_proof", "signed with none")
    hs256 = unsigned({"typ": "dpop+jwt", "alg": "HS256", "jwk": key.jwk}, {**claims, "jti": "hs256"})
    hs256 += "." + b64url(hmac.new(json.dumps(key.jwk).encode(), hs256.encode(), hashlib.sha256).digest())
    refused(get({"Authorization": f"DPoP {token}", "DPoP": hs256}), "invalid_dpop_proof", "signed with HS256")
    # A proof signed by another key that claims to carry ours: the signature does not verify.
    forged = DeviceKey().proof("GET", me, token, header={"jwk": key.jwk})
    refused(get({"Authorization": f"DPoP {token}", "DPoP": forged}), "invalid_dpop_proof", "signature does not verify")
    # Both sides of the window: 50 s old passes, 70 s old does not.
    assert get({"Authorization": f"DPoP {token}", "DPoP": key.proof("GET", me, token, iat=now - 50)}).status_code == 200
    refused(get({"Authorization": f"DPoP {token}", "DPoP": key.proof("GET", me, token, iat=now - 70)}), "invalid_dpop_proof", "good for 60 s")


def test_a_proof_used_on_one_instance_is_refused_on_the_other(pair):
    a, b = pair
    key = DeviceKey()
    token = bound_session(a, key).headers["X-Session-Token"]
    proof = key.proof("GET", a.url + "/api/v1/me", token)
    assert requests.get(a.url + "/api/v1/me", headers={"Authorization": f"DPoP {token}", "DPoP": proof}, timeout=30).status_code == 200
    # The instances differ only in port, so the proof names a's URL: the replay store is what refuses it.
    other = requests.get(b.url + "/api/v1/me", headers={"Authorization": f"DPoP {token}", "DPoP": proof, "Host": f"127.0.0.1:{a.port}"}, timeout=30)
    refused(other, "invalid_dpop_proof", "jti was used before")
    fresh = key.headers("GET", b.url + "/api/v1/me", token)
    assert requests.get(b.url + "/api/v1/me", headers=fresh, timeout=30).status_code == 200


def test_sign_ins_bind_by_id_token_and_by_rsa_key_and_refuse_a_bad_proof_without_spending_the_id_token(foyer, nanoidp):
    key = DeviceKey()
    id_token = app_tokens_from_nanoidp(nanoidp, "finn")["id_token"]
    url = foyer.url + "/api/v1/sessions"
    refused(id_token_sign_in(foyer, id_token, proof=key.proof("GET", url)), "invalid_dpop_proof", "(htm)")
    answer = id_token_sign_in(foyer, id_token, proof=key.proof("POST", url))
    assert answer.status_code == 201 and answer.json()["token_type"] == "DPoP", answer.text
    token = answer.headers["X-Session-Token"]
    me = foyer.url + "/api/v1/me"
    assert requests.get(me, headers=key.headers("GET", me, token), timeout=30).json()["provider"] == "nanoidp"

    rsa_key = DeviceKey("RS256")
    token = bound_session(foyer, rsa_key).headers["X-Session-Token"]
    assert requests.get(me, headers=rsa_key.headers("GET", me, token), timeout=30).status_code == 200


def test_unbound_sessions_work_as_before_and_are_not_taken_as_dpop(foyer):
    answer = password_sign_in(foyer)
    assert answer.status_code == 201 and answer.json()["token_type"] == "Bearer"
    token = answer.headers["X-Session-Token"]
    assert answer.cookies["foyer_session"] == token
    me = foyer.url + "/api/v1/me"
    assert requests.get(me, headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code == 200
    assert requests.get(me, cookies={"foyer_session": token}, headers={"Accept": "application/json"}, timeout=30).status_code == 200
    refused(requests.get(me, headers=DeviceKey().headers("GET", me, token), timeout=30), "invalid_token", "not bound to a key")
    unknown = requests.get(me, headers=DeviceKey().headers("GET", me, "no-such-session"), timeout=30)
    assert unknown.status_code == 401 and unknown.headers["WWW-Authenticate"].startswith("DPoP "), unknown.headers


def test_a_bound_session_is_listed_and_revoked_like_any_other(foyer):
    key = DeviceKey()
    answer = bound_session(foyer, key)
    token, session_id = answer.headers["X-Session-Token"], answer.json()["id"]
    listing = foyer.url + "/api/v1/sessions"
    sessions = requests.get(listing, headers=key.headers("GET", listing, token), timeout=30).json()
    assert [s["token_type"] for s in sessions if s["id"] == session_id] == ["DPoP"]
    handover = foyer.url + "/api/v1/session/cookie"
    cookie = requests.get(handover, headers=key.headers("GET", handover, token), timeout=30).cookies["foyer_session"]
    current = foyer.url + "/api/v1/sessions/current"
    assert requests.delete(current, headers=key.headers("DELETE", current, token), timeout=30).status_code == 204
    me = foyer.url + "/api/v1/me"
    assert requests.get(me, headers=key.headers("GET", me, token), timeout=30).status_code == 401
    assert requests.get(me, cookies={"foyer_session": cookie}, headers={"Accept": "application/json"}, timeout=30).status_code == 401


def test_a_bound_token_opens_a_websocket_only_with_a_proof_on_the_upgrade(foyer):
    key = DeviceKey()
    token = bound_session(foyer, key).headers["X-Session-Token"]
    url = foyer.url.replace("http://", "ws://") + "/graphql"

    async def initialise(upgrade_headers: dict) -> str:
        async with connect(url, subprotocols=["graphql-transport-ws"], additional_headers=upgrade_headers) as socket_:
            await socket_.send(json.dumps({"type": "connection_init", "payload": {"Authorization": f"DPoP {token}"}}))
            try:
                reply = json.loads(await socket_.recv())
                if reply["type"] != "connection_ack":
                    return reply["type"]
                await socket_.send(json.dumps({"type": "subscribe", "id": "1", "payload": {"query": "{ allTasks { id } }"}}))
                return json.loads(await socket_.recv())["type"]
            except ConnectionClosed:
                return f"closed {socket_.close_code}"

    def run(headers: dict) -> str:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, asyncio.wait_for(initialise(headers), 10)).result()

    assert run({"DPoP": key.proof("GET", url, token)}) == "next", "a proof for the upgrade request, ws:// as the app addressed it"
    assert run({}) == "closed 4403", "no proof"
    assert run({"DPoP": DeviceKey().proof("GET", url, token)}) == "closed 4403", "another key"
