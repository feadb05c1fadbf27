"""`Idempotency-Key` with real clients: curl writing posts, and GraphQL mutations relayed to the ariadne task server
(which counts what it received), where a first request still running makes the second one's answer a 409."""
import concurrent.futures
import json
import uuid

import pytest

from conftest import RunningServer, TaskServer, curl_response
from test_graphql import session_token
from test_graphql_edge import calls, marker, post_with_headers


def create_post(server, token: str, key: str, title: str):
    # `Name;` is how curl sends a header with an empty value (`Name:` alone would remove it).
    key_header = f"Idempotency-Key: {key}" if key else "Idempotency-Key;"
    return curl_response(
        server.url + "/api/v1/posts", "-X", "POST", "-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/json",
        "-H", key_header, "--data-binary", json.dumps({"title": title, "content": "Sent once, whatever the network did."}),
    )


def test_a_post_sent_twice_with_one_key_is_stored_once(server):
    token, key, title = session_token(server), str(uuid.uuid4()), f"Once {uuid.uuid4().hex[:8]}"
    status, headers, body = create_post(server, token, key, title)
    assert status == 201, body
    again_status, again_headers, again_body = create_post(server, token, key, title)
    assert again_status == 201
    assert again_headers["idempotent-replayed"] == "true"
    assert json.loads(again_body)["id"] == json.loads(body)["id"]
    assert again_headers["location"] == headers["location"]
    _, _, listed = curl_response(server.url + "/api/v1/posts?per_page=100")
    assert [post["title"] for post in json.loads(listed)].count(title) == 1

    other_status, _, other_body = create_post(server, token, key, title + " and more")
    assert other_status == 422
    assert "already used for a different request" in json.loads(other_body)["error"]

    for bad_key, why in (("", "empty"), ("k" * 256, "256 characters")):
        bad_status, _, bad_body = create_post(server, token, bad_key, title)
        assert bad_status == 400 and why in json.loads(bad_body)["error"], bad_body


def change_post(server, token: str, post_id: int, key: str, if_match: str, title: str):
    return curl_response(
        server.url + f"/api/v1/posts/{post_id}", "-X", "PATCH", "-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/json",
        "-H", f"Idempotency-Key: {key}", "-H", f"If-Match: {if_match}", "--data-binary", json.dumps({"title": title}),
    )


def test_a_write_sent_again_after_its_answer_was_lost_gets_its_first_answer_not_a_second_judgement(server):
    """A queued write whose answer the network lost is sent again with its key: it was judged once, and that judgement
    is its answer, 200 or 412, although the post moved on meanwhile (judged again, the 200 would become a 412)."""
    token = session_token(server)
    status, _, body = create_post(server, token, str(uuid.uuid4()), "Judged once")
    post_id = json.loads(body)["id"]

    applied_key, refused_key = str(uuid.uuid4()), str(uuid.uuid4())
    status, headers, body = change_post(server, token, post_id, applied_key, '"1"', "Applied from version 1")
    assert status == 200 and json.loads(body)["version"] == 2, body
    status, headers, refused = change_post(server, token, post_id, refused_key, '"1"', "Refused from version 1")
    assert status == 412 and headers["content-type"] == "application/problem+json", refused
    # Someone writes over it; then both come again, as a phone's queue sends what it never heard back about.
    assert change_post(server, token, post_id, str(uuid.uuid4()), '"2"', "Later, elsewhere")[0] == 200
    again_status, again_headers, again_body = change_post(server, token, post_id, applied_key, '"1"', "Applied from version 1")
    assert again_status == 200 and again_headers["idempotent-replayed"] == "true"
    assert json.loads(again_body)["version"] == 2 and json.loads(again_body)["title"] == "Applied from version 1"
    again_status, again_headers, again_body = change_post(server, token, post_id, refused_key, '"1"', "Refused from version 1")
    assert again_status == 412 and again_headers["idempotent-replayed"] == "true" and again_body == refused
    _, _, now = curl_response(server.url + f"/api/v1/posts/{post_id}")
    assert json.loads(now)["title"] == "Later, elsewhere" and json.loads(now)["version"] == 3


@pytest.fixture(scope="module")
def slow_upstream(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("idempotency")
    peer = TaskServer(workdir, token="idempotent-secret")
    foyer = RunningServer(workdir, extra_env={"FOYER_GRAPHQL_TOKEN": peer.token}, extra_args=["--graphql-url", peer.url])
    yield peer, foyer
    foyer.stop()
    peer.stop()


def test_a_mutation_sent_again_while_the_first_runs_is_409_and_reaches_the_upstream_once(slow_upstream):
    peer, foyer = slow_upstream
    token, key, name = session_token(foyer), str(uuid.uuid4()), "Slow" + marker()
    mutation = {"query": f'mutation {name} {{ createTask(title: "{name}", description: "once") {{ id title }} }}', "operationName": name}

    def send(_):
        return post_with_headers(foyer.url + "/graphql", mutation, token, {"Idempotency-Key": key})

    # The peer holds `Slow…` operations half a second: the others arrive while the first runs.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(send, range(4)))
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [200, 409, 409, 409], answers
    refused_headers, refused = next((headers, body) for status, headers, body in answers if status == 409)
    assert refused["errors"][0]["extensions"]["code"] == "IDEMPOTENCY_KEY_IN_USE"
    assert refused_headers["Retry-After"] == "1"  # unlike a conflict of versions: send it again soon
    assert calls(peer.url, f"mutation {name}") == 1

    status, headers, replayed = send(None)
    assert status == 200 and headers["Idempotent-Replayed"] == "true"
    assert replayed == next(body for status, _, body in answers if status == 200)
    assert calls(peer.url, f"mutation {name}") == 1
