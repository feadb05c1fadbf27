"""The OpenAPI document stays true: Schemathesis generates requests from it against the running server (with a Unified
Push peer, so device registrations can succeed), and clients generated from it (Python, Swift) register a device."""
import importlib
import json
import os
import pathlib
import subprocess
import sys
import urllib.request

import pytest

from conftest import DEMO_EMAIL, REPO, RunningServer, foyer_binary
from test_graphql import session_token
from test_push import PUSH_ENV, ios_token, push_args, ups  # noqa: F401  (the Unified Push peer)


def test_document_is_served_and_names_every_api_route(server):
    with urllib.request.urlopen(server.url + "/openapi.json", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        document = json.load(response)
    assert document["openapi"].startswith("3.1")
    assert set(document["paths"]) == {
        "/api/v1/sessions", "/api/v1/sessions/{id}", "/api/v1/me", "/api/v1/session/cookie", "/api/v1/users", "/api/v1/password_resets",
        "/api/v1/me/export", "/api/v1/me/email_confirmation", "/api/v1/me/terms", "/api/v1/reports",
        "/api/v1/users/{id}", "/api/v1/blocks", "/api/v1/blocks/{user_id}",
        "/api/v1/moderation/reports", "/api/v1/moderation/reports/{id}/actions", "/moderation/reports/{id}/picture",
        "/api/v1/moderation/audit", "/api/v1/moderation/roles",
        "/api/v1/posts", "/api/v1/posts/{id}", "/pictures/{id}/{variant}",
        "/api/v1/devices", "/api/v1/devices/{token}", "/api/v1/notification_tokens", "/tasks.json",
        "/mobile-services.json", "/configurations/{platform}_v1.json", "/turbo/{platform}/path_configuration", "/healthz",
        "/api/v1/passkeys", "/api/v1/passkeys/{id}", "/api/v1/passkeys/registration_options", "/api/v1/passkeys/authentication_options",
        "/.well-known/apple-app-site-association", "/.well-known/assetlinks.json",
    }


def foyer_registering_devices(workdir, ups):  # noqa: F811
    return RunningServer(workdir, extra_env=PUSH_ENV, extra_args=push_args(ups))


@pytest.fixture(scope="module")
def push_foyer(tmp_path_factory, ups):  # noqa: F811
    """A server registering devices at the peer, for the generated clients. Schemathesis has a server of its own:
    it fails sign-ins by the hundred, and the sign-in throttle would refuse the clients' sign-ins after it."""
    running = foyer_registering_devices(tmp_path_factory.mktemp("foyer-openapi"), ups)
    yield running
    running.stop()


@pytest.fixture
def fuzzed_foyer(tmp_path_factory, ups):  # noqa: F811
    """The server Schemathesis alone talks to, stopped when its run is over."""
    running = foyer_registering_devices(tmp_path_factory.mktemp("foyer-fuzzed"), ups)
    yield running
    running.stop()


def test_every_documented_operation_conforms(fuzzed_foyer, ups, tmp_path):  # noqa: F811
    server = fuzzed_foyer
    # The run's account is a moderator, so the queue's routes are exercised beyond their 403.
    made = subprocess.run(
        [foyer_binary(), "user", "role", DEMO_EMAIL, "moderator", "--database", str(server.database)], capture_output=True, text=True, timeout=60,
    )
    assert made.returncode == 0, made.stderr
    token = session_token(server)
    earlier_requests = len(ups.requests)
    schemathesis = pathlib.Path(sys.executable).with_name("schemathesis")
    run = subprocess.run(
        [
            str(schemathesis), "--config-file", str(REPO / "Tests/Interop/schemathesis.toml"),
            "run", server.url + "/openapi.json",
            "-H", f"Authorization: Bearer {token}",
            "--checks", "all",
            # Revoking would end the very session the run authenticates with; deleting, its very account.
            "--exclude-operation-id", "revokeSession", "--exclude-operation-id", "deleteAccount",
            "--workers", "1", "--max-time", "45", "--seed", "20261121",
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, SCHEMATHESIS_HOOKS="schemathesis_hooks", PYTHONPATH=str(REPO / "Tests/Interop")),
    )
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert any(path == "/rest/registry/device" and method == "POST" for method, path, *_ in ups.requests[earlier_requests:]), \
        "no registration of the run's reached the peer"


def test_a_generated_python_client_registers_a_device(push_foyer, ups, tmp_path):  # noqa: F811
    generator = pathlib.Path(sys.executable).with_name("openapi-python-client")
    run = subprocess.run(
        [str(generator), "generate", "--path", str(REPO / "Public/openapi.json"), "--meta", "none", "--output-path", str(tmp_path / "foyer_client")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        client_module = importlib.import_module("foyer_client")
        register = importlib.import_module("foyer_client.api.default.register_device")
        get_device = importlib.import_module("foyer_client.api.default.get_device")
        models = importlib.import_module("foyer_client.models")
    finally:
        sys.path.remove(str(tmp_path))
    client = client_module.AuthenticatedClient(base_url=push_foyer.url, token=session_token(push_foyer))
    device_token = ios_token()
    body = models.IOSDeviceRegistration(device_token=device_token, device_type="ios", operating_system="iOS", os_version="18.1", categories=["tasks"])
    response = register.sync_detailed(client=client, body=body)
    assert response.status_code == 201, response.content
    assert isinstance(response.parsed, models.Device)
    assert response.parsed.device_token == device_token and response.parsed.state.value == "registered"
    assert get_device.sync(token=device_token, client=client).os_version == "18.1"
    assert any(i.get("deviceToken") == device_token for i in ups.installations.values())


def test_a_generated_swift_client_registers_a_device(push_foyer, ups):  # noqa: F811
    """Tests/GeneratedClients/Swift: swift-openapi-generator's client from the same document (built by scripts/test)."""
    binary = os.environ.get("FOYER_SWIFT_CLIENT") or str(REPO / "Tests/GeneratedClients/Swift/.build/debug/FoyerClient")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"no generated Swift client at {binary}: scripts/test builds it (swift build in Tests/GeneratedClients/Swift)")
    device_token = ios_token()
    run = subprocess.run([binary, "register-device", push_foyer.url, session_token(push_foyer), device_token], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"registered {device_token}" in run.stdout
    assert any(i.get("deviceToken") == device_token for i in ups.installations.values())
