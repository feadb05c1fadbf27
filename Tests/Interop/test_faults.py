"""Faults, on loopback and bounded in time: Foyer killed with -9 under writes, the GraphQL upstream killed under
load, the realm stopped under signed-in users. Nothing acknowledged is lost, nothing answers 5xx that need not."""
import http.client
import json
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import DEMO_EMAIL, DEMO_PASSWORD, KeycloakPeer, RunningServer, TaskServer, curl_response
from test_graphql import post


def folder(path):
    path.mkdir()
    return path


def api_sign_in(foyer, body: dict) -> str:
    status, headers, text = curl_response(foyer.url + "/api/v1/sessions", "-H", "Content-Type: application/json", "--data", json.dumps(body))
    assert status == 201, text
    return headers["x-session-token"]


def test_every_post_acknowledged_before_a_kill_9_is_there_after_the_restart(tmp_path):
    foyer = RunningServer(tmp_path)
    token = api_sign_in(foyer, {"email": DEMO_EMAIL, "password": DEMO_PASSWORD})
    acknowledged: list[tuple[int, str]] = []
    unexpected: list[str] = []  # any answer but 201, and any failure before the kill
    lock = threading.Lock()
    killing = threading.Event()

    def write(writer: int):
        for number in range(100_000):
            title = f"Writer {writer} post {number}"
            request = urllib.request.Request(
                foyer.url + "/api/v1/posts", method="POST",
                data=json.dumps({"title": title, "content": "Written while the server may die."}).encode(),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    with lock:
                        if response.status == 201:
                            acknowledged.append((json.load(response)["id"], title))
                        else:
                            unexpected.append(f"{title}: {response.status}")
            except urllib.error.HTTPError as error:  # an answer, so the server was there to give a right one
                with lock:
                    unexpected.append(f"{title}: {error.code} {error.read()[:200]!r}")
                return
            except (OSError, http.client.HTTPException) as error:
                if not killing.is_set():
                    with lock:
                        unexpected.append(f"{title}: {error!r} before the kill")
                return  # the server is gone: nothing after this was acknowledged

    writers = [threading.Thread(target=write, args=(number,)) for number in range(4)]
    for writer in writers:
        writer.start()
    deadline = time.monotonic() + 30
    while len(acknowledged) < 50 and not unexpected and time.monotonic() < deadline:
        time.sleep(0.05)
    killing.set()
    foyer.process.send_signal(signal.SIGKILL)
    foyer.process.wait(timeout=10)
    for writer in writers:
        writer.join(timeout=20)
    foyer.stop()
    assert not any(writer.is_alive() for writer in writers), "every writer saw the server go"
    assert not unexpected, unexpected[:5]
    assert len(acknowledged) >= 50, "the writers got going before the kill"

    restarted = RunningServer(tmp_path)
    try:
        missing = []
        for post_id, title in acknowledged:
            status, _, body = curl_response(restarted.url + f"/api/v1/posts/{post_id}")
            if status != 200 or json.loads(body)["title"] != title:
                missing.append((post_id, title, status))
        assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged posts lost: {missing[:5]}"
    finally:
        restarted.stop()


def test_killing_the_graphql_upstream_under_load_gives_no_5xx_on_task_pages(tmp_path):
    wrk = shutil.which("wrk")
    assert wrk, "wrk is missing: scripts/test installs it"
    tasks = TaskServer(folder(tmp_path / "tasks"), token="fault-token")
    foyer = RunningServer(folder(tmp_path / "foyer"), extra_env={"FOYER_GRAPHQL_TOKEN": "fault-token"}, extra_args=["--graphql-url", tasks.url])
    try:
        token = api_sign_in(foyer, {"email": DEMO_EMAIL, "password": DEMO_PASSWORD})
        status, body = post(foyer.url + "/graphql", {"query": 'mutation { createTask(title: "Survives", description: "d") { id } }'}, token)
        assert status == 200, body
        cookie = ["-H", f"Cookie: foyer_session={token}", "-H", "Accept: text/html"]
        status, _, page = curl_response(foyer.url + "/tasks", *cookie)
        assert status == 200 and "Survives" in page  # and now the offline copy has it

        load = subprocess.Popen([wrk, "-t2", "-c8", "-d5s", *cookie, foyer.url + "/tasks"], stdout=subprocess.PIPE, text=True)
        time.sleep(2)
        tasks.process.send_signal(signal.SIGKILL)
        tasks.process.wait(timeout=10)
        output, _ = load.communicate(timeout=30)
        requests = int(re.search(r"(\d+) requests in", output).group(1))
        assert requests > 100, output
        assert "Non-2xx" not in output and "Socket errors" not in output, output

        status, _, page = curl_response(foyer.url + "/tasks", *cookie)
        assert status == 200 and "Survives" in page, "served from the offline copy"
    finally:
        foyer.stop()
        tasks.stop()


def test_with_the_realm_stopped_signed_in_sessions_keep_working_where_no_fresh_token_is_needed(tmp_path):
    realm = KeycloakPeer(folder(tmp_path / "oidc"))
    foyer = RunningServer(folder(tmp_path / "foyer"), extra_env={"FOYER_KEYCLOAK_CLIENT_SECRET": realm.client_secret}, extra_args=realm.foyer_args())
    try:
        token = api_sign_in(foyer, {"username": "ada", "password": "ada password"})
        # A provider's account accepts the terms before it posts (see README, Moderation).
        status, _, _ = curl_response(foyer.url + "/api/v1/me/terms", "-X", "POST", "-H", f"Authorization: Bearer {token}")
        assert status == 200
        realm.stop()

        status, _, page = curl_response(foyer.url + "/posts", "-H", f"Cookie: foyer_session={token}", "-H", "Accept: text/html")
        assert status == 200 and "New post" in page, "still signed in"
        status, _, body = curl_response(
            foyer.url + "/api/v1/posts", "-H", "Content-Type: application/json", "-H", f"Authorization: Bearer {token}",
            "--data", json.dumps({"title": "Written while the realm is down", "content": "Sessions are Foyer's own."}),
        )
        assert status == 201, body
        assert curl_response(foyer.url + "/api/v1/me", "-H", f"Authorization: Bearer {token}")[0] == 200
        # A new sign-in needs the realm: a clear 503, not a wrong password.
        status, _, body = curl_response(foyer.url + "/api/v1/sessions", "-H", "Content-Type: application/json",
                                        "--data", json.dumps({"username": "bob", "password": "bob password"}))
        assert status == 503, body
    finally:
        foyer.stop()
        realm.stop()
