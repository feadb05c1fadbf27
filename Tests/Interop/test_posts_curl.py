"""curl drives the posts API the way a developer tries it: sign in, then create, list, update, delete."""
import json

from test_curl import curl, headers_and_body
from conftest import DEMO_EMAIL, DEMO_PASSWORD


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
    assert headers_and_body(gone.stdout)[0] == 404
