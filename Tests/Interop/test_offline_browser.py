"""Pages that keep working offline, in real Chromium: Foyer's service worker keeps visited pages per person, opens the
offline page for the others, and holds task and post writes made offline until the network is back.

Offline is Playwright's context.set_offline(True), which (Chromium, Playwright ≥ 1.50) also takes the network from
the service worker, as a phone losing it would."""
import datetime
import json
import os
import pathlib
import uuid
import zoneinfo

import pytest

from conftest import DEMO_EMAIL, DEMO_PASSWORD, wait_for_page, wait_until
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_graphql import post, session_token
from test_posts_browser import sign_in

ZONE = "Asia/Tokyo"  # not the machine's: the notice must be in the reader's zone
SCREENSHOTS = os.environ.get("FOYER_SCREENSHOTS")  # a folder: the note's screenshots are taken there


@pytest.fixture(params=["embedded", "upstream"])
def foyer(request):
    """Each test runs against the embedded task service and against the ariadne task server."""
    return request.getfixturevalue("server" if request.param == "embedded" else "upstream_foyer")


def controlled_page(browser, foyer, email=DEMO_EMAIL, password=DEMO_PASSWORD):  # noqa: F811
    """A signed-in page in a browser context of its own, once the worker controls it."""
    context = browser.new_context(timezone_id=ZONE)
    page = context.new_page()
    sign_in(page, foyer, email, password)
    wait_for_page(page, "navigator.serviceWorker.controller !== null", timeout=10000)
    return context, page


def create_task(foyer, token, title, status="OPEN") -> dict:
    code, body = post(
        foyer.url + "/graphql",
        {"query": "mutation($t: String!, $s: TaskStatus) { createTask(title: $t, description: \"made offline test\", status: $s) { id version title } }",
         "variables": {"t": title, "s": status}},
        token,
    )
    assert code == 200, body
    return json.loads(body)["data"]["createTask"]


def all_tasks(foyer, token) -> list[dict]:
    code, body = post(foyer.url + "/graphql", {"query": "{ allTasks { id version title status } }"}, token)
    assert code == 200, body
    return json.loads(body)["data"]["allTasks"]


def notice(page) -> str:
    page.locator("#offline-notice").wait_for()
    return page.locator("#offline-notice").inner_text()


def clock_now_in_zone() -> set[str]:
    """The minute now in the reader's zone, and the one before (the page may have been kept a minute ago)."""
    now = datetime.datetime.now(zoneinfo.ZoneInfo(ZONE))
    return {(now - datetime.timedelta(minutes=back)).strftime("%H:%M") for back in (0, 1)}


def screenshot(page, name):
    if SCREENSHOTS:
        pathlib.Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=f"{SCREENSHOTS}/{name}.png", full_page=True)


def test_visited_pages_open_offline_with_a_notice_and_others_open_the_offline_page(foyer, browser):  # noqa: F811
    token = session_token(foyer)
    task = create_task(foyer, token, f"Read offline {uuid.uuid4().hex[:6]}")
    context, page = controlled_page(browser, foyer)
    for path in ["/tasks", f"/tasks/{task['id']}", "/posts"]:
        page.goto(foyer.url + path)
        page.locator("main h1").first.wait_for()
    context.set_offline(True)

    page.goto(foyer.url + "/tasks")
    assert task["title"] in page.locator("main").inner_text()
    text = notice(page)
    assert text.startswith("Offline — showing this page as it was at "), text
    assert text.rsplit(" ", 1)[1] in clock_now_in_zone(), text
    assert page.locator("#offline-notice").get_attribute("role") == "status"
    screenshot(page, "tasks-offline")

    # A Turbo visit (a link followed in the page) too, not only a navigation.
    page.click(f"a[href='/tasks/{task['id']}']")
    page.wait_for_url(foyer.url + f"/tasks/{task['id']}")
    page.locator("article.task h1").wait_for()
    assert page.locator("article.task h1").inner_text() == task["title"]
    assert notice(page).startswith("Offline — showing this page as it was at ")

    page.goto(foyer.url + "/posts")
    assert notice(page).startswith("Offline — showing this page as it was at ")

    # Never visited: Foyer's offline page, listing what can be opened.
    page.goto(foyer.url + "/tasks/never-visited")
    page.locator("#offline-page").wait_for()
    assert page.locator("main h1").inner_text() == "You are offline"
    page.locator("#offline-pages li").first.wait_for()
    kept = page.locator("#offline-pages a").evaluate_all("links => links.map(link => link.getAttribute('href'))")
    assert {"/tasks", f"/tasks/{task['id']}", "/posts"} <= set(kept), kept
    screenshot(page, "offline-page")

    # Back online: the page as it is now, without the notice.
    context.set_offline(False)
    page.goto(foyer.url + "/tasks")
    page.locator("main h1").wait_for()
    assert page.locator("#offline-notice").count() == 0
    context.close()
