"""Keycloak sign-in and token relay against a real OIDC provider (nanoidp in Keycloak's layout) and the ariadne task
server checking every relayed token against the realm's JWKS."""
import base64
import concurrent.futures
import json
import sqlite3
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import KeycloakPeer, RunningServer, TaskServer, free_port
from test_graphql import post

# The provider announces 32 s lifetimes; Foyer refreshes within 30 s of expiry, so 2 s after sign-in it must.
ANNOUNCED_LIFETIME = 32


@pytest.fixture(scope="module")
def realm(tmp_path_factory):
    peer = KeycloakPeer(tmp_path_factory.mktemp("oidc"), expires_in=ANNOUNCED_LIFETIME)
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def guarded_task_server(tmp_path_factory, realm):
    """Only a valid token of the realm gets through: a task page works only if Foyer relays one."""
    peer = TaskServer(tmp_path_factory.mktemp("guarded-tasks"), token=None, extra_env={
        "TASK_SERVER_JWKS_URL": realm.issuer + "/protocol/openid-connect/certs", "TASK_SERVER_ISSUER": realm.issuer,
    })
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def foyer(tmp_path_factory, realm, guarded_task_server):
    running = RunningServer(
        tmp_path_factory.mktemp("foyer-keycloak"), extra_env={"FOYER_KEYCLOAK_CLIENT_SECRET": realm.client_secret},
        extra_args=[*realm.foyer_args(), "--graphql-url", guarded_task_server.url],
    )
    yield running
    running.stop()


def curl_sign_in(foyer, username: str, password: str) -> tuple[int, dict, str]:
    result = subprocess.run(
        ["curl", "-sS", "-i", "-X", "POST", foyer.url + "/api/v1/sessions", "-H", "Content-Type: application/json",
         "--data", json.dumps({"username": username, "password": password})],
        capture_output=True, timeout=60, check=True,
    )
    head, _, body = result.stdout.decode().partition("\r\n\r\n")
    lines = head.split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(": ")
        headers.setdefault(name.lower(), value)
    return int(lines[0].split()[1]), headers, body


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
