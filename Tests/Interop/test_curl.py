"""A curl transcript: what a developer types to try the native sign-in by hand."""
import json
import re
import subprocess

from conftest import DEMO_EMAIL, DEMO_PASSWORD


def curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "--silent", "--show-error", "--max-time", "10", *args], capture_output=True, text=True, check=True)


def headers_and_body(output: str):
    # text mode has already turned curl's CRLF line ends into "\n".
    head, _, body = output.partition("\n\n")
    lines = head.split("\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return status, headers, body


def test_api_sign_in_then_bearer_and_cookie_jar(server, tmp_path):
    jar = tmp_path / "cookies.txt"
    signed_in = curl(
        "--include", "--cookie-jar", str(jar),
        "-H", "Content-Type: application/json",
        "-d", json.dumps({"email": DEMO_EMAIL, "password": DEMO_PASSWORD}),
        server.url + "/api/v1/sessions",
    )
    status, headers, body = headers_and_body(signed_in.stdout)
    assert status == 201
    token = headers["x-session-token"][0]
    session = json.loads(body)
    assert session["user"]["email"] == DEMO_EMAIL
    assert session["user_agent"].startswith("curl/")
    assert any(cookie.startswith(f"foyer_session={token};") and "HttpOnly" in cookie for cookie in headers["set-cookie"])

    me = curl("--fail", "-H", f"Authorization: Bearer {token}", server.url + "/api/v1/me")
    assert json.loads(me.stdout)["email"] == DEMO_EMAIL

    page = curl("--include", "--cookie", str(jar), "-H", "Accept: text/html", server.url + "/account")
    status, headers, body = headers_and_body(page.stdout)
    assert status == 200
    assert headers["content-type"][0].startswith("text/html")
    assert DEMO_EMAIL in body and "curl/" in body
    assert re.search(r'<meta name="csrf-token" content="[^"]+">', body)

    # Signing out with the token ends both: the header token and the cookie share one session.
    revoked = curl("--include", "-X", "DELETE", "-H", f"Authorization: Bearer {token}", server.url + "/api/v1/sessions/current")
    assert headers_and_body(revoked.stdout)[0] == 204
    after = curl("--include", "--cookie", str(jar), "-H", "Accept: text/html", server.url + "/account")
    status, headers, body = headers_and_body(after.stdout)
    assert status == 401
    assert 'action="/sign_in"' in body


def test_wrong_password_and_anonymous_json(server):
    wrong = curl("--include", "-d", f"email={DEMO_EMAIL}&password=nope", server.url + "/api/v1/sessions")
    status, _, body = headers_and_body(wrong.stdout)
    assert status == 401
    assert json.loads(body) == {"error": "That email or password is incorrect"}

    anonymous = curl("--include", server.url + "/api/v1/me")
    status, headers, body = headers_and_body(anonymous.stdout)
    assert status == 401
    assert headers["www-authenticate"] == ["Bearer"]
    assert "error" in json.loads(body)


def test_path_configuration_revalidates_with_etag(server):
    first = curl("--include", server.url + "/configurations/android_v1.json")
    status, headers, body = headers_and_body(first.stdout)
    assert status == 200
    assert headers["cache-control"] == ["no-cache"]
    rules = json.loads(body)["rules"]
    assert rules[0]["patterns"] == [".*"] and "uri" in rules[0]["properties"]
    again = curl("--include", "-H", f"If-None-Match: {headers['etag'][0]}", server.url + "/configurations/android_v1.json")
    assert headers_and_body(again.stdout)[0] == 304


def test_request_id_is_echoed(server):
    response = curl("--include", "-H", "X-Request-Id: trace-42", server.url + "/healthz")
    assert headers_and_body(response.stdout)[1]["x-request-id"] == ["trace-42"]
