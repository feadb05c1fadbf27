"""Live pages in any number of tabs: twenty tabs of one Chromium on plain HTTP/1.1, where a browser opens at most six
connections to a site and a stream per tab would leave the seventh page hanging. The tabs share one connection held
by one of them; closing that tab moves it to another without losing events, and a sign-out reaches every tab."""
import os
import shutil
import time

from PIL import Image

from conftest import RunningServer, close_context, wait_for_page, wait_until
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_graphql import post, session_token
from test_live import create_post, open_event_streams, resumed_counts
from test_https import HTTPSServer
from test_posts_browser import sign_in

TABS = 20


def connected(page):
    wait_for_page(page, "document.querySelector('turbo-stream-source')?.hasAttribute('connected')", timeout=5000)


def keep_screenshot(pages, path):
    """The tabs side by side, five to a row, as one picture."""
    shots = []
    for number, page in enumerate(pages):
        page.screenshot(path=f"{path}.{number}.png")
        shots.append(Image.open(f"{path}.{number}.png").resize((384, 240)))
    sheet = Image.new("RGB", (384 * 5, 240 * ((len(shots) + 4) // 5)), "white")
    for number, shot in enumerate(shots):
        sheet.paste(shot, (384 * (number % 5), 240 * (number // 5)))
    sheet.save(path)


def test_twenty_tabs_share_one_connection_and_see_every_change(own_server, browser, tmp_path):  # noqa: F811
    twenty_tabs(own_server, browser.new_context(viewport={"width": 1280, "height": 800}), tmp_path, "http/1.1")


def test_twenty_tabs_over_https_and_http2(tmp_path, browser, monkeypatch):  # noqa: F811
    """The same over Foyer's own TLS, where Chromium speaks h2 to it: every page and the shared stream on one
    connection."""
    https = HTTPSServer(tmp_path, extra_env={"FOYER_SHUTDOWN_GRACE": "1"})
    # This test's own requests (the API, /metrics) trust the test CA too.
    monkeypatch.setenv("SSL_CERT_FILE", str(https.ca))
    try:
        twenty_tabs(https, browser.new_context(viewport={"width": 1280, "height": 800}, ignore_https_errors=True), tmp_path, "h2")
    finally:
        https.stop()


def twenty_tabs(server, context, tmp_path, protocol: str):
    try:
        first = context.new_page()
        sign_in(first, server)
        pages = [first] + [context.new_page() for _ in range(TABS - 1)]
        # Every fourth tab follows the task stream, the others the post stream: one connection carries both.
        task_tabs = [page for number, page in enumerate(pages) if number % 4 == 3]
        post_tabs = [page for page in pages if page not in task_tabs]
        for page in pages:
            # With a stream per tab, the seventh page would never load: the browser's six connections are all held.
            page.goto(server.url + ("/tasks" if page in task_tabs else "/posts"), timeout=10000)
            connected(page)
            page.evaluate("window.neverReloaded = true")
            # (Over plain HTTP the offline worker answers navigations, which then name no protocol; over this test's
            # untrusted certificate Chromium runs no service worker.)
            if protocol == "h2":
                assert page.evaluate("performance.getEntriesByType('navigation')[0].nextHopProtocol") == "h2"
        wait_until(lambda: open_event_streams(server) == 1, seconds=5, what=f"one event stream for the whole browser (not {open_event_streams(server)})")

        token = session_token(server)
        title, task_title = f"In every tab {time.time_ns()}", f"A task for every tab {time.time_ns()}"
        create_post(server, token, title)
        status, body = post(server.url + "/graphql", {"query": f'mutation {{ createTask(title: "{task_title}", description: "d") {{ id }} }}'}, token)
        assert status == 200 and b'"errors"' not in body, body
        for page in post_tabs:
            page.locator("ol.posts li .post-title", has_text=title).wait_for(timeout=5000)
        for page in task_tabs:
            page.locator("li.task", has_text=task_title).wait_for(timeout=5000)
        sheet = tmp_path / f"twenty-tabs-{protocol.replace('/', '')}.png"
        keep_screenshot(pages, str(sheet))
        if os.environ.get("FOYER_SCREENSHOTS"):
            shutil.copy(sheet, os.environ["FOYER_SCREENSHOTS"])

        # The first tab took the lock first and holds the connection. It goes; a post written at once (before another
        # tab has connected) reaches every other tab all the same, from where each was.
        first.close()
        pages.remove(first)
        post_tabs.remove(first)
        after_close = f"After the first tab closed {time.time_ns()}"
        create_post(server, token, after_close)
        for page in post_tabs:
            page.locator("ol.posts li .post-title", has_text=after_close).wait_for(timeout=5000)
        for page in pages:
            connected(page)
            assert page.evaluate("window.neverReloaded") is True
        wait_until(lambda: open_event_streams(server) == 1, seconds=5, what="again one event stream, from another tab")

        # Signing out in the tab that now holds the connection (the next to ask for the lock) reaches every other one.
        pages[0].click("form[action='/sign_out'] button")
        for page in pages[1:]:
            page.wait_for_url(server.url + "/sign_in", timeout=5000)
    finally:
        close_context(context)


def test_tabs_follow_on_from_where_each_was_after_a_restart(tmp_path, browser):  # noqa: F811
    """The server restarts under the tabs (same port, same database): the tab holding the connection comes back saying
    where each stream was, and every tab gets what changed while it was gone, with no reload."""
    foyer = RunningServer(tmp_path)
    context = browser.new_context()
    try:
        pages = [context.new_page() for _ in range(3)]
        for page in pages:
            page.goto(foyer.url + "/posts")
            connected(page)
            page.evaluate("window.neverReloaded = true")
        token = session_token(foyer)
        before = f"Before the restart {time.time_ns()}"
        create_post(foyer, token, before)
        for page in pages:
            page.locator("ol.posts li .post-title", has_text=before).wait_for(timeout=5000)

        foyer.stop()
        for page in pages:
            wait_for_page(page, "!document.querySelector('turbo-stream-source').hasAttribute('connected')")
        foyer = RunningServer(tmp_path, port=foyer.port, database=foyer.database)
        while_away = f"Written before the tabs came back {time.time_ns()}"
        create_post(foyer, token, while_away)
        for page in pages:
            page.locator("ol.posts li .post-title", has_text=while_away).wait_for(timeout=10000)
            assert page.locator("ol.posts li .post-title", has_text=before).count() == 1
            assert page.evaluate("window.neverReloaded") is True
        wait_until(lambda: open_event_streams(foyer) == 1, seconds=5, what="one event stream for the browser again")
        assert resumed_counts(foyer)["replayed"] == 1, "one reconnect, which got what it missed"
    finally:
        close_context(context)
        foyer.stop()
