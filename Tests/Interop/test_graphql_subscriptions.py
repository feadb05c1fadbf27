"""WebSocket /graphql with real clients: gql in both subprotocols, on the embedded service and relayed to the ariadne
task server; raw `websockets` for the refusals and the same-origin cookie rule."""
import asyncio
import json

import pytest
from gql import Client, gql
from gql.transport.exceptions import TransportQueryError
from gql.transport.websockets import WebsocketsTransport
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

from conftest import RunningServer, TaskServer
from test_graphql import post, session_token

PROTOCOLS = ["graphql-transport-ws", "graphql-ws"]
CREATE = {"query": 'mutation($title: String!) { createTask(title: $title, description: "live") { id } }'}


def ws_url(foyer) -> str:
    return foyer.url.replace("http://", "ws://") + "/graphql"


async def first_event(url: str, protocol: str, token: str, subscription: str, trigger) -> dict:
    """Subscribes with gql, then calls `trigger` (in a thread) every 0.3 s until the first event arrives."""
    transport = WebsocketsTransport(url=url, init_payload={"Authorization": f"Bearer {token}"}, subprotocols=[protocol])
    async with Client(transport=transport, fetch_schema_from_transport=False) as session:
        async def keep_triggering():
            while True:
                await asyncio.sleep(0.3)
                await asyncio.to_thread(trigger)

        triggering = asyncio.create_task(keep_triggering())
        try:
            async for result in session.subscribe(gql(subscription)):
                return result
        finally:
            triggering.cancel()


def run(coroutine, seconds: float = 20):
    return asyncio.run(asyncio.wait_for(coroutine, seconds))


def task_added_through(foyer, protocol: str, title: str) -> dict:
    """Subscribes to taskAdded through Foyer with gql, creating tasks titled `title` through Foyer until one arrives."""
    token = session_token(foyer)

    def create():
        status, body = post(foyer.url + "/graphql", {**CREATE, "variables": {"title": title}}, token)
        assert status == 200, body

    return run(first_event(ws_url(foyer), protocol, token, "subscription { taskAdded { id title version } }", create))["taskAdded"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_gql_subscribes_on_the_embedded_service(server, protocol):
    title = f"Embedded event over {protocol}"
    task = task_added_through(server, protocol, title)
    assert task["title"] == title
    assert task["version"] == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_gql_queries_and_mutates_over_the_socket(server, protocol):
    token = session_token(server)

    async def talk():
        transport = WebsocketsTransport(url=ws_url(server), init_payload={"Authorization": f"Bearer {token}"}, subprotocols=[protocol])
        async with Client(transport=transport, fetch_schema_from_transport=False) as session:
            created = await session.execute(gql('mutation { createTask(title: "Socket", description: "d") { id } }'))
            read = gql("query($id: ID!) { getTask(id: $id) { title } }")
            read.variable_values = {"id": created["createTask"]["id"]}
            fetched = await session.execute(read)
            with pytest.raises(TransportQueryError):
                await session.execute(gql("query { noSuchField }"))
            return fetched

    assert run(talk())["getTask"]["title"] == "Socket"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_subscriptions_are_relayed_to_the_upstream(upstream_foyer, task_server, protocol):
    """The event starts at the ariadne server (a mutation made there directly) and reaches gql through Foyer."""
    token = session_token(upstream_foyer)
    title = f"Upstream event over {protocol}"

    def create_upstream():
        status, body = post(task_server.url, {**CREATE, "variables": {"title": title}}, task_server.token)
        assert status == 200, body

    event = run(first_event(ws_url(upstream_foyer), protocol, token, "subscription { taskAdded { id title } }", create_upstream))
    assert event["taskAdded"]["title"] == title


def test_an_upstream_refusing_our_token_ends_the_subscription_with_a_clear_error(tmp_path):
    peer = TaskServer(tmp_path, token="the-right-one")
    foyer = RunningServer(tmp_path, extra_env={"FOYER_GRAPHQL_TOKEN": "a-wrong-one"}, extra_args=["--graphql-url", peer.url])
    try:
        token = session_token(foyer)

        async def subscribe():
            transport = WebsocketsTransport(url=ws_url(foyer), init_payload={"Authorization": f"Bearer {token}"}, subprotocols=["graphql-transport-ws"])
            async with Client(transport=transport, fetch_schema_from_transport=False) as session:
                with pytest.raises(TransportQueryError) as refused:
                    async for _ in session.subscribe(gql("subscription { taskAdded { id } }")):
                        pass
                return refused.value

        error = run(subscribe())
        assert "upstream session expired" in str(error)
    finally:
        foyer.stop()
        peer.stop()


def test_refusals_follow_each_protocol(server):
    async def talk():
        async with connect(ws_url(server), subprotocols=["graphql-transport-ws"]) as socket:
            assert socket.subprotocol == "graphql-transport-ws"
            await socket.send(json.dumps({"type": "connection_init", "payload": {"Authorization": "Bearer nonsense"}}))
            await socket.wait_closed()
            modern = socket.close_code
        async with connect(ws_url(server), subprotocols=["graphql-ws"]) as socket:
            assert socket.subprotocol == "graphql-ws"
            await socket.send(json.dumps({"type": "connection_init", "payload": {}}))
            legacy = json.loads(await socket.recv())
        return modern, legacy

    modern, legacy = run(talk())
    assert modern == 4403
    assert legacy["type"] == "connection_error"
    assert "Sign in first" in legacy["payload"]["message"]


def test_the_session_cookie_counts_only_from_our_own_origin(server):
    token = session_token(server)
    cookie = {"Cookie": f"foyer_session={token}"}

    async def talk(origin: str):
        async with connect(ws_url(server), subprotocols=["graphql-transport-ws"], origin=origin, additional_headers=cookie) as socket:
            await socket.send(json.dumps({"type": "connection_init"}))
            try:
                return json.loads(await socket.recv())["type"]
            except ConnectionClosedError:  # refused: the close is the answer
                return socket.close_code

    assert run(talk(server.url)) == "connection_ack"
    assert run(talk("https://evil.example")) == 4403
