"""Operating Foyer, against real clients and peers: /metrics read by Prometheus' own text parser, gzip decoded by
curl and Chromium, X-Request-Id and traceparent followed into the GraphQL server and the realm, JSON log lines."""
import asyncio
import json
import pathlib
import re
import subprocess
import urllib.request

import pytest
from gql import Client, gql
from gql.transport.websockets import WebsocketsTransport
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO, KeycloakPeer, RunningServer, TaskServer, curl_response, free_port, wait_for_page
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_graphql import post

METRICS_TOKEN = "scrape-me"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("traces") / "peers.jsonl"


@pytest.fixture(scope="module")
def stack(tmp_path_factory, traces):
    """Foyer with a realm and a task server that checks the realm's tokens; both peers log the trace headers."""
    port = free_port()
    realm = KeycloakPeer(tmp_path_factory.mktemp("oidc"), extra_env={"PEER_TRACE_LOG": str(traces)})
    tasks = TaskServer(tmp_path_factory.mktemp("tasks"), token=None, extra_env={
        "TASK_SERVER_JWKS_URL": realm.issuer + "/protocol/openid-connect/certs", "TASK_SERVER_ISSUER": realm.issuer,
        "PEER_TRACE_LOG": str(traces),
    })
    foyer = RunningServer(
        tmp_path_factory.mktemp("foyer-operations"),
        extra_env={"FOYER_KEYCLOAK_CLIENT_SECRET": realm.client_secret, "FOYER_METRICS_TOKEN": METRICS_TOKEN},
        extra_args=[*realm.foyer_args(), "--graphql-url", tasks.url], port=port,
    )
    yield foyer
    foyer.stop()
    tasks.stop()
    realm.stop()


def scrape(foyer) -> dict[tuple, float]:
    """Every sample as {(name, sorted labels): value}, parsed by the Prometheus client library."""
    request = urllib.request.Request(foyer.url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
    }


def sign_in(foyer, username: str, password: str, *headers: str) -> tuple[int, dict, str]:
    return curl_response(foyer.url + "/api/v1/sessions", "-H", "Content-Type: application/json", *headers,
                         "--data", json.dumps({"username": username, "password": password}))


def peer_traces(path: pathlib.Path, request_id: str) -> list[dict]:
    return [entry for entry in map(json.loads, path.read_text().splitlines()) if entry.get("x-request-id") == request_id]


def test_metrics_move_as_a_scripted_session_goes_and_prometheus_reads_them(stack):
    status, _, _ = curl_response(stack.url + "/metrics")
    assert status == 401, "--metrics-token guards the scrape"
    before = scrape(stack)

    status, headers, _ = sign_in(stack, "ada", "ada password")
    assert status == 201
    token = headers["x-session-token"]
    assert sign_in(stack, "bob", "not bob's password")[0] == 401
    status, body = post(stack.url + "/graphql", {"query": "{ allTasks { id title } }"}, token)
    assert status == 200, body
    for task_id in ("901", "902"):
        assert curl_response(stack.url + f"/tasks/{task_id}", "-H", f"Authorization: Bearer {token}")[0] == 404

    after = scrape(stack)

    def moved(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert moved("foyer_sign_ins_total", outcome="success") == 1
    assert moved("foyer_sign_ins_total", outcome="wrong_password") == 1
    assert moved("foyer_sign_ins_total", outcome="throttled") == 0
    assert moved("foyer_keycloak_request_duration_seconds_count", call="token") == 2  # ada's and bob's password grants
    assert moved("foyer_keycloak_failures_total", call="token") == 0
    assert moved("foyer_graphql_upstream_request_duration_seconds_count") >= 3  # the query and the two task reads
    assert moved("foyer_graphql_upstream_failures_total", kind="unreachable") == 0
    assert moved("foyer_http_requests_total", route="/graphql", method="POST", status="2xx") == 1
    assert moved("foyer_http_requests_total", route="/tasks/{id}", method="GET", status="4xx") == 2
    assert moved("foyer_http_request_duration_seconds_count", route="/api/v1/sessions", method="POST", status="2xx") == 1
    assert not [key for key in after if "901" in str(key)], "raw paths never become labels"
    assert after[("foyer_websockets_open", ())] == 0


def test_every_upstream_call_carries_the_request_id_and_continues_the_trace(stack, traces):
    headers = ["-H", "X-Request-Id: follow-sign-in", "-H", f"traceparent: 00-{TRACE_ID}-{CALLER_SPAN}-01"]
    status, answered, _ = sign_in(stack, "ada", "ada password", *headers)
    assert status == 201 and answered["x-request-id"] == "follow-sign-in"
    token = answered["x-session-token"]
    realm_calls = peer_traces(traces, "follow-sign-in")
    assert realm_calls, "the realm saw the sign-in's id"
    for call in realm_calls:
        version, trace_id, parent, flags = call["traceparent"].split("-")
        assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
        assert parent != CALLER_SPAN, "Foyer's own span is the parent of its calls"

    status, _, _ = curl_response(
        stack.url + "/graphql", "-H", "Content-Type: application/json", "-H", f"Authorization: Bearer {token}",
        "-H", "X-Request-Id: follow-graphql", "--data", json.dumps({"query": "{ allTasks { id } }"}),
    )
    assert status == 200
    [graphql_call] = peer_traces(traces, "follow-graphql")
    assert graphql_call["type"] == "http" and re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", graphql_call["traceparent"])

    async def subscribe_with_headers():
        transport = WebsocketsTransport(
            url=stack.url.replace("http://", "ws://") + "/graphql", init_payload={"Authorization": f"Bearer {token}"},
            subprotocols=["graphql-transport-ws"],
            headers={"X-Request-Id": "follow-socket", "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-00"},
        )
        async with Client(transport=transport, fetch_schema_from_transport=False) as session:
            subscription = session.subscribe(gql("subscription { taskAdded { id } }"))
            waiting = asyncio.ensure_future(subscription.__anext__())
            for _ in range(100):
                if peer_traces(traces, "follow-socket"):
                    break
                await asyncio.sleep(0.05)
            waiting.cancel()

    asyncio.run(subscribe_with_headers())
    [socket_call] = peer_traces(traces, "follow-socket")
    assert socket_call["type"] == "websocket"
    assert socket_call["traceparent"].startswith(f"00-{TRACE_ID}-") and socket_call["traceparent"].endswith("-00")
    log = stack.log_path.read_text()
    assert f"trace_id={TRACE_ID}" in log and "request_id=follow-graphql" in log


def test_curl_decodes_gzip_pages_json_and_the_turbo_script(server):
    turbo = (REPO / "Public/turbo.min.js").read_text()
    status, headers, body = curl_response(server.url + "/turbo.min.js", "--compressed")
    assert status == 200 and headers["content-encoding"] == "gzip" and "accept-encoding" in headers["vary"].lower()
    assert body == turbo
    assert int(headers["content-length"]) < len(turbo) / 2

    for path in ("/posts", "/posts.json"):
        status, headers, body = curl_response(server.url + path, "--compressed")
        status_plain, headers_plain, body_plain = curl_response(server.url + path)
        assert status == status_plain == 200
        assert headers["content-encoding"] == "gzip" and "content-encoding" not in headers_plain
        assert body == body_plain, path

    # A live stream stays as it is: each event must reach the page when it happens, not when a buffer fills.
    page = curl_response(server.url + "/posts", "--compressed")[2]
    stream = re.search(r'<turbo-stream-source src="([^"]+)"', page).group(1)
    result = subprocess.run(["curl", "-sS", "-i", "-N", "--max-time", "1", "-H", "Accept-Encoding: gzip", server.url + stream],
                            capture_output=True, timeout=30)
    head = result.stdout.decode(errors="replace").split("\r\n\r\n")[0].lower()
    assert "content-type: text/event-stream" in head and "content-encoding" not in head


def test_chromium_runs_turbo_from_a_gzipped_script(server, browser):  # noqa: F811
    page = browser.new_page()
    encodings = {}
    page.on("response", lambda response: encodings.__setitem__(response.url.split("?")[0], response.headers.get("content-encoding")))
    page.goto(server.url + "/posts")
    wait_for_page(page, "window.Turbo !== undefined && document.querySelector('#posts') !== null")
    assert encodings[server.url + "/turbo.min.js"] == "gzip"
    assert encodings[server.url + "/posts"] == "gzip"
    page.close()


def test_json_log_lines_name_the_request_and_its_trace(tmp_path):
    foyer = RunningServer(tmp_path, extra_args=["--log-format", "json"])
    try:
        curl_response(foyer.url + "/up", "-H", "X-Request-Id: json-log-line", "-H", f"traceparent: 00-{TRACE_ID}-{CALLER_SPAN}-01")
    finally:
        foyer.stop()
    lines = [json.loads(line) for line in foyer.log_path.read_text().splitlines() if line.startswith("{")]
    assert lines, "every line is one JSON object"
    [line] = [line for line in lines if line.get("request_id") == "json-log-line"]
    assert line["trace_id"] == TRACE_ID and line["level"] == "info" and line["message"].startswith("GET /up 200")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"])
    # The line saying it listens says when each step of the start was reached, in ms since main began.
    [listening] = [line for line in lines if line["message"].startswith("Server started and listening")]
    steps = [float(listening[f"start.{step}_ms"]) for step in ("command_line", "database", "features", "listening")]
    assert 0 < steps[0] and steps == sorted(steps), listening
    assert 0 < float(listening["start.templates_ms"]) <= steps[2], listening
