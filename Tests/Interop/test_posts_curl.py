"""curl drives the posts API the way a developer tries it: sign in, then create, list, update, delete."""
import json
import os
import subprocess

import pytest

from test_curl import curl, headers_and_body
from conftest import DEMO_EMAIL, DEMO_PASSWORD, REPO, RunningServer


def test_posts_crud_with_the_session_token(server):
    signed_in = curl("--include", "-H", "Content-Type: application/json",
                     "-d", json.dumps({"email": DEMO_EMAIL, "password": DEMO_PASSWORD}), server.url + "/api/v1/sessions")
    token = headers_and_body(signed_in.stdout)[1]["x-session-token"][0]
    auth = ["-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/json"]

    created = curl("--include", *auth, "-d", json.dumps({"title": "From curl", "content": "Line one\n\nLine two"}),
                   server.url + "/api/v1/posts")
    status, headers, body = headers_and_body(created.stdout)
    assert status == 201
    post = json.loads(body)
    assert post["title"] == "From curl" and post["author"]["name"] == DEMO_EMAIL.split("@")[0]
    assert "email" not in post["author"], "authors by name, never by address"
    assert headers["location"][0].endswith(f"/api/v1/posts/{post['id']}")

    listed = curl("--include", server.url + "/api/v1/posts?per_page=100")
    status, headers, body = headers_and_body(listed.stdout)
    assert status == 200
    assert post["id"] in [item["id"] for item in json.loads(body)]
    assert 'rel="first"' in headers["link"][0]

    updated = curl("--include", "-X", "PATCH", *auth, "-d", json.dumps({"title": "From curl, edited"}),
                   f"{server.url}/api/v1/posts/{post['id']}")
    status, _, body = headers_and_body(updated.stdout)
    assert status == 200
    assert json.loads(body)["title"] == "From curl, edited"
    assert json.loads(body)["content"] == "Line one\n\nLine two"

    invalid = curl("--include", "-X", "PATCH", *auth, "-d", json.dumps({"title": ""}), f"{server.url}/api/v1/posts/{post['id']}")
    status, _, body = headers_and_body(invalid.stdout)
    assert status == 422
    assert json.loads(body)["errors"] == {"title": ["can't be blank"]}

    page = curl("--fail", f"{server.url}/posts/{post['id']}")
    assert "From curl, edited" in page.stdout and "<p>Line one</p>" in page.stdout

    deleted = curl("--include", "-X", "DELETE", "-H", f"Authorization: Bearer {token}", f"{server.url}/api/v1/posts/{post['id']}")
    assert headers_and_body(deleted.stdout)[0] == 204
    gone = curl("--include", f"{server.url}/posts/{post['id']}.json")
    assert headers_and_body(gone.stdout)[0] == 410, "deleted by its author"
    assert headers_and_body(curl("--include", f"{server.url}/posts/{post['id'] + 1000}.json").stdout)[0] == 404


def signed_in_curl(server) -> list[str]:
    signed_in = curl("--include", "-H", "Content-Type: application/json",
                     "-d", json.dumps({"email": DEMO_EMAIL, "password": DEMO_PASSWORD}), server.url + "/api/v1/sessions")
    token = headers_and_body(signed_in.stdout)[1]["x-session-token"][0]
    return ["-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/json"]


def write(server, auth, post_id: int, fields: dict | None, *extra: str, method: str = "PATCH") -> tuple[int, dict, dict]:
    body = ["-d", json.dumps(fields)] if fields is not None else []
    answer = curl("--include", "-X", method, *auth, *extra, *body, f"{server.url}/api/v1/posts/{post_id}")
    status, headers, body = headers_and_body(answer.stdout)
    return status, headers, json.loads(body) if body.strip() else {}


def test_if_match_stale_current_any_and_missing_as_curl_sends_them(server):
    auth = signed_in_curl(server)
    created = curl("--include", *auth, "-d", json.dumps({"title": "Versioned", "content": "One"}), server.url + "/api/v1/posts")
    status, headers, body = headers_and_body(created.stdout)
    post = json.loads(body)
    assert status == 201 and post["version"] == 1 and headers["etag"] == ['"1"']
    read = headers_and_body(curl("--include", f"{server.url}/api/v1/posts/{post['id']}").stdout)
    assert read[1]["etag"] == ['"1"']
    assert headers_and_body(curl("--include", "-H", 'If-None-Match: "1"', f"{server.url}/api/v1/posts/{post['id']}").stdout)[0] == 304

    status, headers, current = write(server, auth, post["id"], {"title": "Current"}, "-H", 'If-Match: "1"')
    assert status == 200 and current["version"] == 2 and headers["etag"] == ['"2"']
    status, headers, stale = write(server, auth, post["id"], {"title": "Stale"}, "-H", 'If-Match: "1"')
    assert status == 412 and headers["content-type"] == ["application/problem+json"] and headers["etag"] == ['"2"']
    assert stale["post"]["title"] == "Current" and stale["conflicting_fields"] == ["title"]
    status, _, forced = write(server, auth, post["id"], {"title": "Forced"}, "-H", "If-Match: *", method="PUT")
    assert status == 200 and forced["version"] == 3
    status, _, bare = write(server, auth, post["id"], {"content": "No precondition"})
    assert status == 200 and bare["version"] == 4 and bare["title"] == "Forced"
    assert write(server, auth, post["id"], None, "-H", 'If-Match: "3"', method="DELETE")[0] == 412
    assert write(server, auth, post["id"], None, "-H", 'If-Match: "4"', method="DELETE")[0] == 204


def test_a_server_that_requires_preconditions_refuses_a_write_without_one(tmp_path):
    running = RunningServer(tmp_path, extra_args=["--require-preconditions"])
    try:
        auth = signed_in_curl(running)
        created = curl("--include", *auth, "-d", json.dumps({"title": "Guarded"}), running.url + "/api/v1/posts")
        post = json.loads(headers_and_body(created.stdout)[2])
        status, _, refused = write(running, auth, post["id"], {"title": "No version"})
        assert status == 428 and "If-Match" in refused["error"]
        assert write(running, auth, post["id"], {"title": "Named"}, "-H", 'If-Match: "1"')[0] == 200
        # The client generated from the OpenAPI document sees the same 428, as its own case.
        assert edit_with_the_generated_client(running, auth, post["id"])["none"] == "428"
    finally:
        running.stop()


def edit_with_the_generated_client(server, auth, post_id: int) -> dict[str, str]:
    """Tests/GeneratedClients/Swift's `edit-post` (swift-openapi-generator's client, built by scripts/test): each
    If-Match case it sends, and what it got."""
    binary = os.environ.get("FOYER_SWIFT_CLIENT") or str(REPO / "Tests/GeneratedClients/Swift/.build/debug/FoyerClient")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"no generated Swift client at {binary}: scripts/test builds it (swift build in Tests/GeneratedClients/Swift)")
    token = auth[1].removeprefix("Authorization: Bearer ")
    run = subprocess.run([binary, "edit-post", server.url, token, str(post_id)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return dict(line.split(" ", 1) for line in run.stdout.splitlines())


def test_the_generated_swift_client_sends_if_match_current_stale_any_and_none(server):
    auth = signed_in_curl(server)
    created = curl("--include", *auth, "-d", json.dumps({"title": "For the generated client"}), server.url + "/api/v1/posts")
    post = json.loads(headers_and_body(created.stdout)[2])
    seen = edit_with_the_generated_client(server, auth, post["id"])
    assert seen == {
        "read": '"1"',
        "current": "200 version 2",
        "stale": "412 version 2 conflicting title",
        "any": "200 version 3",
        "none": "200 version 4",
    }
