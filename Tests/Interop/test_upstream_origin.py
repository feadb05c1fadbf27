"""Foyer's upstream websockets are a server's, not a browser's: no `Origin`. Against strawberry-graphql, which refuses
a websocket whose Origin names another host:port (as a page on another site would), relayed subscriptions and the
live task feed still connect."""
import asyncio
import subprocess
import sys
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from conftest import REPO, RunningServer, free_port, wait_until_listening
from test_graphql_subscriptions import task_added_through


@pytest.fixture(scope="module")
def strawberry(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("strawberry")
    port = free_port()
    log_path = workdir / "strawberry.log"
    with open(log_path, "a") as log:
        process = subprocess.Popen(
            [sys.executable, str(REPO / "Tests/Interop/peers/strawberry_task_server.py"), str(port)], stdout=log, stderr=subprocess.STDOUT,
        )
    wait_until_listening(port, process, log_path, "the strawberry task server")
    yield f"http://127.0.0.1:{port}/graphql"
    process.terminate()
    process.wait(timeout=15)


@pytest.fixture(scope="module")
def foyer(tmp_path_factory, strawberry):
    running = RunningServer(tmp_path_factory.mktemp("foyer-strawberry"), extra_args=["--graphql-url", strawberry])
    yield running
    running.stop()


def test_the_peer_refuses_what_a_browser_on_another_origin_sends(strawberry):
    """What HummingbirdWSClient sent: `Origin: ws://127.0.0.1`, the host without its port."""
    async def handshake(origin):
        async with connect(strawberry.replace("http://", "ws://"), origin=origin, subprotocols=["graphql-ws"]):
            return True

    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(handshake("ws://127.0.0.1"))
    assert refused.value.response.status_code == 403
    assert asyncio.run(handshake(None))


@pytest.mark.parametrize("protocol", ["graphql-ws", "graphql-transport-ws"])
def test_a_subscription_is_relayed_through_an_origin_checking_upstream(foyer, protocol):
    title = f"Relayed to strawberry over {protocol}"
    assert task_added_through(foyer, protocol, title)["title"] == title


def test_the_live_task_feed_follows_the_origin_checking_upstream(foyer):
    deadline = time.monotonic() + 20
    while "Following the upstream's task events" not in foyer.log_path.read_text():
        assert time.monotonic() < deadline, foyer.log_path.read_text()[-2000:]
        time.sleep(0.2)
    assert "WebSocket upgrade failed" not in foyer.log_path.read_text()
