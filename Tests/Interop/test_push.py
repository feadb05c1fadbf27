"""Push notifications: apps register devices through Foyer (curl here), Foyer registers them at a Unified Push peer
with the variant's secret, keeps what the peer cannot take in an outbox, and sends task changes to the other users."""
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import DEMO_EMAIL, DEMO_PASSWORD, REPO, RunningServer, curl_response, foyer_binary, free_port, wait_until
from test_graphql import post

sys.path.insert(0, str(REPO / "Tests/Interop/peers"))
from unified_push import UnifiedPushPeer  # noqa: E402

BOB_EMAIL, BOB_PASSWORD = "bob@push.test", "bob's push password"
VARIANTS = {"ios-variant": ("ios-secret", "ios"), "android-variant": ("android-secret", "android")}
APPLICATION = ("push-app", "master-secret")
PUSH_ENV = {
    "FOYER_PUSH_IOS_VARIANT_SECRET": "ios-secret", "FOYER_PUSH_ANDROID_VARIANT_SECRET": "android-secret",
    "FOYER_PUSH_APPLICATION_ID": APPLICATION[0], "FOYER_PUSH_MASTER_SECRET": APPLICATION[1],
}


def push_args(peer) -> list[str]:
    return ["--push-url", peer.url, "--push-ios-variant-id", "ios-variant", "--push-android-variant-id", "android-variant"]


def ios_token() -> str:
    return secrets.token_hex(32)


def register_ios_device(server, token: str) -> None:
    status, answer = curl_json(server, "POST", "/api/v1/devices", token, {"deviceToken": ios_token(), "deviceType": "ios"})
    assert status == 201, answer


def android_token() -> str:
    return "f" + secrets.token_urlsafe(20).replace("-", "_") + ":APA91b" + secrets.token_urlsafe(90)


def sign_in(server, email=DEMO_EMAIL, password=DEMO_PASSWORD) -> tuple[str, int]:
    """A session token and the user's id (the alias UPS knows the user's devices by)."""
    status, headers, body = curl_response(
        server.url + "/api/v1/sessions", "-H", "Content-Type: application/json",
        "--data", json.dumps({"email": email, "password": password}),
    )
    assert status == 201, body
    return headers["x-session-token"], json.loads(body)["user"]["id"]


def curl_json(server, method: str, path: str, token: str | None, body=None) -> tuple[int, object]:
    args = ["-X", method]
    if token:
        args += ["-H", f"Authorization: Bearer {token}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data", body if isinstance(body, str) else json.dumps(body)]
    status, _, text = curl_response(server.url + path, *args)
    return status, (json.loads(text) if text.strip() else None)


def add_user(server, email: str, password: str):
    added = subprocess.run(
        [foyer_binary(), "user", "add", email, "--database", str(server.database)],
        input=password + "\n", capture_output=True, text=True, timeout=60,
    )
    assert added.returncode == 0 or "already" in added.stderr, added.stderr


@pytest.fixture(scope="module")
def ups():
    peer = UnifiedPushPeer(free_port(), VARIANTS, APPLICATION)
    peer.start()
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def push_server(tmp_path_factory, ups):
    running = RunningServer(tmp_path_factory.mktemp("foyer-push"), extra_env=PUSH_ENV, extra_args=push_args(ups))
    add_user(running, BOB_EMAIL, BOB_PASSWORD)
    yield running
    running.stop()


def test_a_device_registered_with_curl_is_held_by_ups_under_the_users_alias(push_server, ups):
    token, user_id = sign_in(push_server)
    device = ios_token()
    status, body = curl_json(push_server, "POST", "/api/v1/devices", token, {
        "deviceToken": device, "deviceType": "ios", "operatingSystem": "iOS", "osVersion": "17.4", "categories": ["tasks"],
    })
    assert status == 201, body
    assert body["device_token"] == device and body["state"] == "registered" and body["categories"] == ["tasks"]

    held = ups.installation(device)
    assert held["alias"] == str(user_id) and held["variantID"] == "ios-variant"
    assert held["operatingSystem"] == "iOS" and held["osVersion"] == "17.4" and held["categories"] == ["tasks"]
    # Foyer authenticated as the iOS variant, with its secret.
    assert any(method == "POST" and user == "ios-variant" for method, _, user, _ in ups.requests)

    status, listed = curl_json(push_server, "GET", "/api/v1/devices", token)
    assert status == 200 and [(d["device_token"], d["state"]) for d in listed if d["device_token"] == device] == [(device, "registered")]

    # Jumpstart-style Hotwire Native apps send {token, platform}.
    android = android_token()
    status, body = curl_json(push_server, "POST", "/api/v1/notification_tokens", token, {"token": android, "platform": "Android"})
    assert status == 201, body
    assert body["device_type"] == "android"
    assert ups.installation(android)["variantID"] == "android-variant"

    # A new token for the same device replaces the old one at UPS (x-ag-old-token).
    newer = ios_token()
    status, body = curl_json(push_server, "POST", "/api/v1/devices", token, {"deviceToken": newer, "deviceType": "ios", "oldDeviceToken": device})
    assert status == 201, body
    assert ups.installation(device) is None and ups.installation(newer)["oldToken"] == device

    status, _ = curl_json(push_server, "DELETE", f"/api/v1/devices/{newer}", token)
    assert status == 204
    assert ups.installation(newer) is None
    assert newer not in [d["device_token"] for d in curl_json(push_server, "GET", "/api/v1/devices", token)[1]]


def test_a_device_deleted_is_gone_until_the_alias_registers_it_again(push_server, ups):
    """What Schemathesis's stateful phase no longer walks through the Jumpstart alias (Tests/Interop/schemathesis.toml)."""
    token, _ = sign_in(push_server)
    device = android_token()
    registration = {"token": device, "platform": "android", "os_version": ""}
    assert curl_json(push_server, "POST", "/api/v1/notification_tokens", token, registration)[0] == 201
    assert curl_json(push_server, "DELETE", f"/api/v1/devices/{device}", token)[0] == 204
    assert curl_json(push_server, "GET", f"/api/v1/devices/{device}", token)[0] == 404
    assert ups.installation(device) is None
    assert curl_json(push_server, "POST", "/api/v1/notification_tokens", token, registration)[0] == 201
    status, body = curl_json(push_server, "GET", f"/api/v1/devices/{device}", token)
    assert status == 200 and body["state"] == "registered" and body["os_version"] == ""
    assert ups.installation(device)["deviceToken"] == device


def test_while_ups_is_away_registrations_wait_and_arrive_by_themselves(push_server, ups):
    token, user_id = sign_in(push_server)
    device = ios_token()
    ups.stop()
    try:
        status, body = curl_json(push_server, "POST", "/api/v1/devices", token, {"deviceToken": device, "deviceType": "ios"})
        assert status == 202, body
        assert body["state"] == "pending"
        status, listed = curl_json(push_server, "GET", f"/api/v1/devices/{device}", token)
        assert status == 200 and listed["state"] == "pending"
    finally:
        ups.start()
    held = wait_until(lambda: ups.installation(device), seconds=15, what="the registration reaching UPS after it came back")
    assert held["alias"] == str(user_id)
    wait_until(lambda: curl_json(push_server, "GET", f"/api/v1/devices/{device}", token)[1]["state"] == "registered", what="state registered")


def test_signing_out_unregisters_the_devices_registered_through_that_session(push_server, ups):
    token, _ = sign_in(push_server)
    other_token, _ = sign_in(push_server)
    device, kept = ios_token(), ios_token()
    assert curl_json(push_server, "POST", "/api/v1/devices", token, {"deviceToken": device, "deviceType": "ios"})[0] == 201
    assert curl_json(push_server, "POST", "/api/v1/devices", other_token, {"deviceToken": kept, "deviceType": "ios"})[0] == 201

    status, _ = curl_json(push_server, "DELETE", "/api/v1/sessions/current", token)
    assert status == 204
    wait_until(lambda: ups.installation(device) is None, seconds=5, what="UPS losing the signed-out device")
    assert ups.installation(kept) is not None, "a device of another session of the same user stays"
    listed = [d["device_token"] for d in curl_json(push_server, "GET", "/api/v1/devices", other_token)[1]]
    assert device not in listed and kept in listed


def test_a_task_created_by_one_user_is_sent_to_the_other_users_alias(push_server, ups):
    demo_token, demo_id = sign_in(push_server)
    bob_token, bob_id = sign_in(push_server, BOB_EMAIL, BOB_PASSWORD)
    register_ios_device(push_server, demo_token)
    assert curl_json(push_server, "POST", "/api/v1/devices", bob_token, {"deviceToken": android_token(), "deviceType": "android"})[0] == 201

    title = f"Pushed {time.time_ns()}"
    status, created = post(push_server.url + "/graphql", {
        "query": "mutation($title: String!) { createTask(title: $title, description: \"for bob\") { id } }", "variables": {"title": title},
    }, demo_token)
    assert status == 200, created
    task_id = json.loads(created)["data"]["createTask"]["id"]

    def about_this_task():
        return [m for m in ups.sent() if m["message"]["user-data"]["taskId"] == task_id and title in m["message"]["alert"]]
    messages = wait_until(about_this_task, seconds=10, what="a message about the new task")
    time.sleep(0.5)  # a second message would come right after the first
    messages = about_this_task()
    assert len(messages) == 1, messages
    message = messages[0]
    assert str(bob_id) in message["criteria"]["alias"] and str(demo_id) not in message["criteria"]["alias"]
    assert title in message["message"]["alert"]
    assert message["message"]["user-data"] == {"taskId": task_id, "change": "created", "path": f"/tasks/{task_id}"}
    # The sender API was called as the push application.
    assert any(path == "/rest/sender" and user == APPLICATION[0] for _, path, user, _ in ups.requests)


def test_bad_registrations_are_refused_clearly_and_nothing_is_half_registered(push_server, ups):
    token, _ = sign_in(push_server)
    bob_token, bob_id = sign_in(push_server, BOB_EMAIL, BOB_PASSWORD)
    before = curl_json(push_server, "GET", "/api/v1/devices", token)[1]

    cases = [
        ({"deviceToken": ios_token(), "deviceType": "windows"}, "deviceType"),
        ({"deviceToken": "", "deviceType": "ios"}, "deviceToken"),
        ({"deviceType": "ios"}, "deviceToken"),
        ({"deviceToken": "a" * 5000, "deviceType": "ios"}, "deviceToken"),
        ({"deviceToken": "abc/../def", "deviceType": "ios"}, "deviceToken"),
        ({"deviceToken": ios_token(), "deviceType": "ios", "categories": "all"}, "categories"),
    ]
    for body, field in cases:
        status, answer = curl_json(push_server, "POST", "/api/v1/devices", token, body)
        assert status == 422, (body, answer)
        assert field in answer["errors"] and answer["error"], answer

    status, answer = curl_json(push_server, "POST", "/api/v1/devices", token, "{not json")
    assert status == 400 and "JSON" in answer["error"]
    status, answer = curl_json(push_server, "POST", "/api/v1/devices", None, {"deviceToken": ios_token(), "deviceType": "ios"})
    assert status == 401

    # A token UPS itself refuses for the platform (not hex for iOS): a 422 naming it, and not kept.
    refused = "not-an-apns-token"
    status, answer = curl_json(push_server, "POST", "/api/v1/devices", token, {"deviceToken": refused, "deviceType": "ios"})
    assert status == 422 and "Unified Push" in answer["error"], answer
    assert ups.installation(refused) is None

    # Another user's device: not theirs to take over, see or remove.
    bobs = ios_token()
    assert curl_json(push_server, "POST", "/api/v1/devices", bob_token, {"deviceToken": bobs, "deviceType": "ios"})[0] == 201
    status, answer = curl_json(push_server, "POST", "/api/v1/devices", token, {"deviceToken": bobs, "deviceType": "ios"})
    assert status == 422 and "another account" in answer["error"]
    assert curl_json(push_server, "GET", f"/api/v1/devices/{bobs}", token)[0] == 404
    assert curl_json(push_server, "DELETE", f"/api/v1/devices/{bobs}", token)[0] == 404
    assert ups.installation(bobs)["alias"] == str(bob_id)
    assert curl_json(push_server, "GET", "/api/v1/devices", token)[1] == before


def test_the_apps_copy_of_mobile_services_has_no_push_secret(tmp_path, ups):
    services = {
        "version": 1, "namespace": "showcase", "clientId": "showcase", "clusterName": "local",
        "services": [{
            "id": "push", "name": "push", "type": "push", "url": ups.url + "/",
            "config": {"ios": {"variantId": "ios-variant", "variantSecret": "ios-secret"},
                       "android": {"variantID": "android-variant", "variantSecret": "android-secret", "senderId": "1234"}},
        }],
    }
    path = tmp_path / "mobile-services.json"
    path.write_text(json.dumps(services))
    running = RunningServer(tmp_path, extra_args=["--mobile-services", str(path)])
    try:
        status, _, served = curl_response(running.url + "/mobile-services.json")
        assert status == 200
        assert "secret" not in served.lower() and "ios-secret" not in served
        push = next(s for s in json.loads(served)["services"] if s["type"] == "push")
        assert push["config"]["ios"] == {"variantId": "ios-variant"}

        # Foyer registers with the secret from the file (which stays on the server).
        token, user_id = sign_in(running)
        device = android_token()
        status, body = curl_json(running, "POST", "/api/v1/devices", token, {"deviceToken": device, "deviceType": "android"})
        assert status == 201, body
        assert ups.installation(device)["variantID"] == "android-variant"
    finally:
        running.stop()


def test_a_wrong_variant_secret_is_a_502_for_the_app_and_a_log_line_for_the_operator(tmp_path, ups):
    running = RunningServer(tmp_path, extra_env={**PUSH_ENV, "FOYER_PUSH_IOS_VARIANT_SECRET": "stale-secret"}, extra_args=push_args(ups))
    try:
        token, _ = sign_in(running)
        device = ios_token()
        status, body = curl_json(running, "POST", "/api/v1/devices", token, {"deviceToken": device, "deviceType": "ios"})
        assert status == 502, body
        assert curl_json(running, "GET", "/api/v1/devices", token)[1] == []
        log = running.log_path.read_text()
        assert "401" in log and "credentials" in log
    finally:
        running.stop()


@pytest.mark.parametrize("args, env, missing", [
    (["--push-url", "http://127.0.0.1:9"], {}, "variant"),
    (["--push-url", "http://127.0.0.1:9", "--push-ios-variant-id", "v"], {}, "FOYER_PUSH_IOS_VARIANT_SECRET"),
    (["--push-ios-variant-id", "v"], {"FOYER_PUSH_IOS_VARIANT_SECRET": "s"}, "--push-url"),
    (["--push-url", "http://127.0.0.1:9", "--push-ios-variant-id", "v"],
     {"FOYER_PUSH_IOS_VARIANT_SECRET": "s", "FOYER_PUSH_APPLICATION_ID": "app"}, "FOYER_PUSH_MASTER_SECRET"),
])
def test_a_half_configured_push_service_stops_start_up_naming_what_is_missing(tmp_path, args, env, missing):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FOYER_PUSH")}
    started = subprocess.run(
        [foyer_binary(), "serve", "--port", str(free_port()), "--database", str(tmp_path / "foyer.sqlite"), "--root", str(REPO), *args],
        env={**clean, **env}, capture_output=True, text=True, timeout=60,
    )
    assert started.returncode != 0
    assert missing in started.stderr, started.stderr


def test_changes_at_a_remote_task_server_reach_every_user_but_their_author(tmp_path, ups, task_server):
    running = RunningServer(
        tmp_path, extra_env={**PUSH_ENV, "FOYER_GRAPHQL_TOKEN": task_server.token},
        extra_args=[*push_args(ups), "--graphql-url", task_server.url],
    )
    try:
        add_user(running, BOB_EMAIL, BOB_PASSWORD)
        demo_token, demo_id = sign_in(running)
        bob_token, bob_id = sign_in(running, BOB_EMAIL, BOB_PASSWORD)
        register_ios_device(running, demo_token)
        register_ios_device(running, bob_token)
        create = "mutation($title: String!) { createTask(title: $title, description: \"remote\") { id } }"
        wait_until(lambda: "Following the upstream's task events" in running.log_path.read_text(), what="the task feed")

        def messages_about(task_id, title):
            return [m for m in ups.sent() if m["message"]["user-data"]["taskId"] == task_id and title in m["message"]["alert"]]

        # Through Foyer: the upstream's event names no author, Foyer's own answer did.
        via_foyer_title, elsewhere_title = f"via Foyer {time.time_ns()}", f"elsewhere {time.time_ns()}"
        status, created = post(running.url + "/graphql", {"query": create, "variables": {"title": via_foyer_title}}, demo_token)
        assert status == 200, created
        via_foyer = json.loads(created)["data"]["createTask"]["id"]
        message = wait_until(lambda: messages_about(via_foyer, via_foyer_title), what="a message about the task made through Foyer")[0]
        assert str(bob_id) in message["criteria"]["alias"] and str(demo_id) not in message["criteria"]["alias"]

        # Straight at the task server: nobody here made it, so everyone with a device hears of it.
        status, created = post(task_server.url, {"query": create, "variables": {"title": elsewhere_title}}, task_server.token)
        assert status == 200, created
        elsewhere = json.loads(created)["data"]["createTask"]["id"]
        message = wait_until(lambda: messages_about(elsewhere, elsewhere_title), what="a message about the task made elsewhere")[0]
        assert {str(bob_id), str(demo_id)} <= set(message["criteria"]["alias"])
    finally:
        running.stop()
