"""Hardening against real clients: Chromium for login CSRF and the Content-Security-Policy, curl for throttling."""
import concurrent.futures
import http.server
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import DEMO_EMAIL, DEMO_PASSWORD, RunningServer, curl_response, foyer_binary, free_port, wait_for_page
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_posts_browser import sign_in


@pytest.fixture
def attacker_site():
    """Pages on another site (`localhost` is another site than `127.0.0.1`), served by a handler the test fills."""
    pages: dict[str, str] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    port = free_port()
    site = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    yield f"http://localhost:{port}", pages
    site.shutdown()


def auto_submitting_form(action: str, fields: dict[str, str]) -> str:
    inputs = "".join(f'<input type="hidden" name="{name}" value="{value}">' for name, value in fields.items())
    return f'<form id="f" method="post" action="{action}">{inputs}</form><script>document.getElementById("f").submit()</script>'


@pytest.mark.parametrize("target", ["/sign_in", "/api/v1/sessions"])
def test_a_form_on_another_site_cannot_sign_a_browser_in(server, browser, attacker_site, target):  # noqa: F811
    origin, pages = attacker_site
    # The attacker even brings a token of its own, from loading the sign-in page itself.
    with urllib.request.urlopen(server.url + "/sign_in", timeout=10) as response:
        html = response.read().decode()
    token = html.split('name="authenticity_token" value="')[1].split('"')[0]
    pages["/win-a-prize"] = auto_submitting_form(server.url + target, {
        "authenticity_token": token, "email": DEMO_EMAIL, "password": DEMO_PASSWORD,
    })
    context = browser.new_context()
    page = context.new_page()
    with page.expect_response(lambda response: response.url == server.url + target) as answered:
        page.goto(origin + "/win-a-prize")
    assert answered.value.status == 403
    assert "foyer_session" not in {cookie["name"] for cookie in context.cookies(server.url)}
    assert page.goto(server.url + "/account").status == 401
    context.close()


def test_no_page_breaks_the_content_security_policy(server, browser):  # noqa: F811
    context = browser.new_context()
    # Init scripts run through DevTools, outside the page's policy: they can watch for violations.
    context.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => "
        "(window.__violations = window.__violations || []).push(e.violatedDirective + ' ' + e.blockedURI))"
    )
    page = context.new_page()
    console = []
    page.on("console", lambda message: console.append(message.text))
    sign_in(page, server)
    for path in ["/", "/posts", "/posts/new", "/tasks", "/tasks/new", "/account", "/sign_in"]:
        response = page.goto(server.url + path)
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'self'" in policy
        wait_for_page(page, "window.Turbo !== undefined")
        if path in ("/posts", "/tasks"):
            # live.js ran and its stream is open: Foyer's own scripts are allowed.
            wait_for_page(page, "document.querySelector('turbo-stream-source')?.hasAttribute('connected')")
        assert page.evaluate("window.__violations || []") == [], path
    # A Turbo Drive form submission, with its progress bar's injected style.
    page.goto(server.url + "/posts/new")
    page.fill("input[name=title]", "Under a policy")
    page.fill("textarea[name=content]", "Nothing inline runs.")
    page.click("main button[type=submit]")
    page.locator("article.post h1").wait_for()
    assert page.evaluate("window.__violations || []") == []
    assert not [text for text in console if "Content Security Policy" in text], console
    context.close()


def curl_sign_in(server, password: str, email: str = DEMO_EMAIL):
    return curl_response(server.url + "/api/v1/sessions", "-H", "Content-Type: application/json",
                         "--data", json.dumps({"email": email, "password": password}))


def test_curl_is_throttled_after_five_wrong_passwords(own_server):
    for _ in range(5):
        status, _, body = curl_sign_in(own_server, "wrong password")
        assert status == 401, body
    status, headers, body = curl_sign_in(own_server, DEMO_PASSWORD)
    assert status == 429, body
    assert 800 < int(headers["retry-after"]) <= 900
    assert "Too many failed sign-ins" in json.loads(body)["error"]
    # Another login from the same client still gets its own five tries.
    assert curl_sign_in(own_server, "wrong password", email="someone@else.test")[0] == 401


def test_up_stays_fast_while_fifty_wrong_sign_ins_hash(own_server):
    """bcrypt runs on a pool of its own: a flood of sign-ins queues there, and the event loops stay free."""
    def wrong_sign_in(index: int) -> int:
        request = urllib.request.Request(
            own_server.url + "/api/v1/sessions", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"email": f"flood{index}@example.test", "password": "wrong"}).encode(),
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    latencies = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        flood = [pool.submit(wrong_sign_in, index) for index in range(50)]
        time.sleep(0.5)
        while not all(future.done() for future in flood) and len(latencies) < 200:
            started = time.monotonic()
            with urllib.request.urlopen(own_server.url + "/up", timeout=10) as response:
                assert response.status == 200
            latencies.append(time.monotonic() - started)
            time.sleep(0.05)
        statuses = [future.result() for future in flood]
    assert set(statuses) <= {401, 429}, statuses
    assert len(latencies) >= 5, "the flood ended before /up could be asked: it no longer measures anything"
    latencies.sort()
    print(f"/up during the flood: {len(latencies)} requests, median {latencies[len(latencies) // 2] * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms")
    # Generous bounds on a shared machine: starving would mean seconds, the usual is a few milliseconds.
    assert latencies[len(latencies) // 2] < 0.25 and latencies[-1] < 2.0, latencies


def test_an_idle_session_ends_and_a_bad_duration_stops_start_up(tmp_path):
    foyer = RunningServer(tmp_path, extra_args=["--session-idle-timeout", "3s"])
    try:
        status, headers, body = curl_sign_in(foyer, DEMO_PASSWORD)
        assert status == 201, body
        token = headers["x-session-token"]
        assert "Max-Age=31536000" in headers["set-cookie"]  # --session-lifetime's default, 365 days
        for _ in range(3):  # used every 1.5 s, it lives on past the idle timeout
            time.sleep(1.5)
            assert curl_response(foyer.url + "/api/v1/me", "-H", f"Authorization: Bearer {token}")[0] == 200
        time.sleep(3.5)
        status, _, body = curl_response(foyer.url + "/api/v1/me", "-H", f"Authorization: Bearer {token}")
        assert status == 401, body
    finally:
        foyer.stop()
    refused = subprocess.run([foyer_binary(), "serve", "--session-lifetime", "a fortnight", "--database", ":memory:"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "--session-lifetime" in refused.stderr and "not a duration" in refused.stderr
