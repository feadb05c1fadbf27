"""/graphql at the edge, against both real upstream peers (ariadne and strawberry), each counting the GraphQL
requests it received (Tests/Interop/peers/request_log.py): a limit per caller, identical queries in flight sent
upstream once, answers kept until the task feed says they changed, for their user only."""
import asyncio
import concurrent.futures
import json
import urllib.error
import urllib.request
import uuid

import pytest
from websockets.asyncio.client import connect

from conftest import RunningServer, TaskServer, wait_until
from test_graphql import post, session_token
from test_graphql_subscriptions import ws_url
from test_instances import fresh_database
from test_push import add_user
from test_upstream_origin import strawberry  # noqa: F401  (the strawberry peer)

BOB_EMAIL, BOB_PASSWORD = "bob@edge.test", "bob's edge password"


def queries_received(base: str) -> list:
    """What the peer at `base` received so far: the `query` of every GraphQL request, in order."""
    with urllib.request.urlopen(base.rstrip("/") + "/_peer/requests", timeout=10) as response:
        return json.load(response)


def calls(base: str, marker: str) -> int:
    """How many requests the peer received whose document holds `marker` (each test's own operation name)."""
    return sum(1 for query in queries_received(base) if query and marker in query)


def post_with_headers(url: str, body, token: str, headers: dict | None = None) -> tuple[int, dict, dict]:
    """POSTs JSON with the session (and `headers`); the status, the answer's headers and its JSON."""
    request = urllib.request.Request(
        url, method="POST", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.load(error)


def marker() -> str:
    """An operation name no other test uses, so each counts only its own requests."""
    return "Edge" + uuid.uuid4().hex[:10]


class Upstream:
    """One upstream peer: where to count its requests, how to call it directly, and Foyers in front of it."""

    def __init__(self, name: str, base: str, graphql_url: str, token: str | None, foyer_args: list[str], foyer_env: dict, workdir):
        self.name, self.base, self.graphql_url, self.token = name, base, graphql_url, token
        self.foyer_args, self.foyer_env, self.workdir = foyer_args, foyer_env, workdir
        self.foyers = []

    def foyer(self, *extra_args: str) -> RunningServer:
        folder = self.workdir / f"foyer-{len(self.foyers)}"
        folder.mkdir()
        running = RunningServer(folder, extra_env=self.foyer_env, extra_args=[*self.foyer_args, *extra_args])
        self.foyers.append(running)
        # Answers that read tasks are kept only while Foyer follows the upstream's task feed.
        wait_until(lambda: "Following the upstream's task events" in running.log_path.read_text(), 20, f"{self.name}'s task feed followed")
        return running

    def create_directly(self, title: str) -> str:
        status, body = post(self.graphql_url, {"query": f'mutation {{ createTask(title: "{title}", description: "direct") {{ id }} }}'}, self.token)
        assert status == 200, body
        return json.loads(body)["data"]["createTask"]["id"]

    def stop(self):
        for running in self.foyers:
            running.stop()


@pytest.fixture(scope="module", params=["ariadne", "strawberry"])
def upstream(request, tmp_path_factory):
    workdir = tmp_path_factory.mktemp(f"edge-{request.param}")
    if request.param == "ariadne":
        peer = TaskServer(workdir, token="edge-secret")
        chosen = Upstream("ariadne", peer.url, peer.url, peer.token, ["--graphql-url", peer.url], {"FOYER_GRAPHQL_TOKEN": peer.token}, workdir)
    else:
        graphql_url = request.getfixturevalue("strawberry")
        peer = None
        chosen = Upstream("strawberry", graphql_url.removesuffix("/graphql"), graphql_url, None, ["--graphql-url", graphql_url], {}, workdir)
    chosen.default_foyer = chosen.foyer()
    yield chosen
    chosen.stop()
    if peer:
        peer.stop()


def all_tasks(name: str) -> dict:
    return {"query": f"query {name} {{ allTasks {{ id title }} }}", "operationName": name}


def titles(reply: bytes) -> list[str]:
    return [task["title"] for task in json.loads(reply)["data"]["allTasks"]]


def test_a_repeated_query_is_not_sent_again(upstream):
    foyer, name = upstream.default_foyer, marker()
    token = session_token(foyer)
    first = post(foyer.url + "/graphql", all_tasks(name), token)
    assert first[0] == 200, first
    assert post(foyer.url + "/graphql", all_tasks(name), token) == first
    assert calls(upstream.base, name) == 1


def test_identical_queries_in_flight_reach_the_upstream_once_and_different_ones_each(upstream):
    # Caching off: only sharing the call in flight can make eight requests one. `Slow…` operations are held by the
    # peer for half a second, so the eight are surely in flight together.
    foyer = upstream.foyer("--graphql-cache", "off")
    token = session_token(foyer)
    identical, different = "Slow" + marker(), "Slow" + marker()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda _: post(foyer.url + "/graphql", all_tasks(identical), token), range(8)))
    assert all(status == 200 for status, _ in replies), replies
    assert len({body for _, body in replies}) == 1
    assert calls(upstream.base, identical) == 1

    def numbered(number):
        body = {"query": f"query {different}($first: Int) {{ allTasks(first: $first) {{ id }} }}", "variables": {"first": number + 1}}
        return post(foyer.url + "/graphql", body, token)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert all(status == 200 for status, _ in pool.map(numbered, range(8)))
    assert calls(upstream.base, different) == 8
    assert calls(upstream.base, identical) == 1

    with urllib.request.urlopen(foyer.url + "/metrics", timeout=10) as response:
        assert "foyer_graphql_deduplicated_total 7" in response.read().decode()


def test_a_task_created_through_foyer_shows_in_the_next_query(upstream):
    foyer, name = upstream.default_foyer, marker()
    token = session_token(foyer)
    before = post(foyer.url + "/graphql", all_tasks(name), token)
    assert post(foyer.url + "/graphql", all_tasks(name), token) == before  # kept
    status, created = post(foyer.url + "/graphql", {"query": f'mutation {{ createTask(title: "{name}", description: "via Foyer") {{ id }} }}'}, token)
    assert status == 200, created
    assert name in titles(post(foyer.url + "/graphql", all_tasks(name), token)[1])
    assert calls(upstream.base, f"query {name}") == 2


def test_a_task_created_at_the_upstream_directly_shows_once_the_feed_reports_it(upstream):
    foyer, name = upstream.default_foyer, marker()
    token = session_token(foyer)
    post(foyer.url + "/graphql", all_tasks(name), token)
    upstream.create_directly(name)
    # Well within the 30 s the answer would otherwise live: the feed's event dropped it.
    wait_until(lambda: name in titles(post(foyer.url + "/graphql", all_tasks(name), token)[1]), 10, "the direct creation shown")


def test_a_task_created_on_a_second_instance_shows_on_the_first(tmp_path):
    """Two instances of the embedded service on one PostgreSQL database: the other's change reaches this one's
    cache by the cluster's messages."""
    database = fresh_database()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = RunningServer(tmp_path / "a", database=database)
    second = RunningServer(tmp_path / "b", database=database)
    try:
        name = marker()
        first_token, second_token = session_token(first), session_token(second)
        before = post(first.url + "/graphql", all_tasks(name), first_token)
        assert before[0] == 200 and name not in titles(before[1])
        status, body = post(second.url + "/graphql", {"query": f'mutation {{ createTask(title: "{name}", description: "on B") {{ id }} }}'}, second_token)
        assert status == 200, body
        wait_until(lambda: name in titles(post(first.url + "/graphql", all_tasks(name), first_token)[1]), 10, "the other instance's task shown")
    finally:
        first.stop()
        second.stop()


def test_two_users_never_share_a_kept_answer_unless_the_scope_is_shared(upstream):
    for scope, expected_calls in (("user", 2), ("shared", 1)):
        foyer, name = upstream.foyer("--graphql-cache-scope", scope), marker()
        add_user(foyer, BOB_EMAIL, BOB_PASSWORD)
        ada, bob = session_token(foyer), session_token(foyer, BOB_EMAIL, BOB_PASSWORD)
        for token in (ada, bob, ada, bob):
            assert post(foyer.url + "/graphql", all_tasks(name), token)[0] == 200
        assert calls(upstream.base, name) == expected_calls, scope


def test_an_answer_with_errors_is_not_kept(upstream):
    foyer, name = upstream.default_foyer, marker()
    token = session_token(foyer)
    failing = {"query": f'query {name} {{ allTasks(after: "not a number") {{ id }} }}'}
    for _ in range(2):
        status, body = post(foyer.url + "/graphql", failing, token)
        assert status == 200 and json.loads(body)["errors"], body
    assert calls(upstream.base, name) == 2


def test_while_the_feed_is_down_nothing_is_answered_from_the_cache(tmp_path):
    """The feed comes from a second ariadne server (`--graphql-ws-url`), so it can go away while queries still reach
    the first: each query then goes upstream, and once the feed is back answers are kept again."""
    queries, feed = TaskServer(tmp_path, token="feed-secret"), TaskServer(tmp_path, token="feed-secret")
    foyer = RunningServer(
        tmp_path, extra_env={"FOYER_GRAPHQL_TOKEN": "feed-secret"},
        extra_args=["--graphql-url", queries.url, "--graphql-ws-url", feed.url.replace("http://", "ws://")],
    )
    try:
        following = lambda: foyer.log_path.read_text().count("Following the upstream's task events")  # noqa: E731
        wait_until(lambda: following() == 1, 20, "the feed followed")
        name, token = marker(), session_token(foyer)
        for _ in range(2):
            assert post(foyer.url + "/graphql", all_tasks(name), token)[0] == 200
        assert calls(queries.url, name) == 1

        feed.stop()
        wait_until(lambda: "Upstream task feed" in foyer.log_path.read_text() or "closed the task feed" in foyer.log_path.read_text(), 20, "the feed lost")
        for expected in (2, 3):
            assert post(foyer.url + "/graphql", all_tasks(name), token)[0] == 200
            assert calls(queries.url, name) == expected

        feed.start()
        wait_until(lambda: following() == 2, 30, "the feed followed again")
        for _ in range(2):
            assert post(foyer.url + "/graphql", all_tasks(name), token)[0] == 200
        assert calls(queries.url, name) == 4
    finally:
        foyer.stop()
        queries.stop()
        feed.stop()


def test_one_caller_over_the_limit_is_refused_while_another_goes_on(upstream):
    foyer, name = upstream.foyer("--graphql-rate-limit", "3/min"), marker()
    add_user(foyer, BOB_EMAIL, BOB_PASSWORD)
    ada, bob = session_token(foyer), session_token(foyer, BOB_EMAIL, BOB_PASSWORD)
    url = foyer.url + "/graphql"
    for left in (2, 1, 0):
        status, headers, _ = post_with_headers(url, all_tasks(name), ada)
        assert status == 200
        assert headers["RateLimit-Policy"] == '"graphql";q=3;w=60'
        assert headers["RateLimit"].startswith(f'"graphql";r={left};')
    status, headers, body = post_with_headers(url, all_tasks(name), ada)
    assert status == 429, body
    assert headers["Retry-After"] == "20"
    assert headers["RateLimit"] == '"graphql";r=0;t=60'
    assert body["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
    assert calls(upstream.base, name) == 1, "refused operations never reach the upstream (and the three allowed shared one answer)"

    assert post_with_headers(url, all_tasks(name), bob)[0] == 200

    async def over_the_socket():
        async with connect(ws_url(foyer), subprotocols=["graphql-transport-ws"]) as socket:
            await socket.send(json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {ada}"}}))
            assert json.loads(await socket.recv())["type"] == "connection_ack"
            await socket.send(json.dumps({"id": "over", "type": "subscribe", "payload": all_tasks(name)}))
            refused = json.loads(await socket.recv())
            # The socket stays: it still answers a ping.
            await socket.send(json.dumps({"type": "ping"}))
            return refused, json.loads(await socket.recv())

    refused, pong = asyncio.run(asyncio.wait_for(over_the_socket(), 20))
    assert refused["type"] == "error" and refused["id"] == "over", refused
    assert refused["payload"][0]["extensions"]["code"] == "RATE_LIMITED"
    assert pong["type"] == "pong"
    with urllib.request.urlopen(foyer.url + "/metrics", timeout=10) as response:
        assert "foyer_graphql_rate_limited_total 2" in response.read().decode()
