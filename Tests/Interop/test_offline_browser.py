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

from conftest import DEMO_EMAIL, DEMO_PASSWORD, REPO, RunningServer, curl_response, wait_for_page, wait_until
from test_browser import NATIVE_USER_AGENT, browser  # noqa: F401  (the shared Chromium fixture)
from test_edge import browser_session_id, create_task, revoke
from test_graphql import post, session_token
from test_live import add_user
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
    task = create_task(foyer, token, f"Read offline {uuid.uuid4().hex[:6]} & 'co' <b>")
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
    assert page.locator(f"#offline-pages a[href='/tasks/{task['id']}']").inner_text() == task["title"]
    screenshot(page, "offline-page")

    # Back online, a kept copy becomes the page as it is now, by itself: what changed meanwhile shows, the notice goes.
    page.goto(foyer.url + "/tasks")
    notice(page)
    meanwhile = create_task(foyer, token, f"Made while away {uuid.uuid4().hex[:6]}")
    context.set_offline(False)
    page.locator("li.task", has_text=meanwhile["title"]).wait_for()
    # The live frame may bring the row before offline.js, on Turbo's load, takes the notice away: wait for that.
    page.locator("#offline-notice").wait_for(state="detached")
    context.close()


def test_a_live_page_catches_up_with_what_changed_while_the_network_was_away(foyer, browser):  # noqa: F811
    token = session_token(foyer)
    context, page = controlled_page(browser, foyer)
    page.goto(foyer.url + "/tasks")
    page.locator("main h1").wait_for()
    wait_for_page(page, "document.querySelector('turbo-stream-source')?.hasAttribute('connected')")
    context.set_offline(True)
    meanwhile = create_task(foyer, token, f"Changed while offline {uuid.uuid4().hex[:6]}")
    context.set_offline(False)
    page.locator("li.task", has_text=meanwhile["title"]).wait_for(timeout=15000)
    context.close()


def writes_logged(foyer, since: int) -> list[str]:
    """The task writes Foyer answered after byte `since` of its log, in order: "POST /tasks 303" and the like."""
    lines = pathlib.Path(foyer.log_path).read_text()[since:].splitlines()
    return [line.split("[Foyer] ", 1)[1].rsplit(" ", 1)[0] for line in lines
            if "[Foyer] " in line and any(f"] {method} /tasks" in line for method in ("POST", "PATCH", "PUT"))]


def test_writes_made_offline_wait_then_reach_the_server_once_in_order(foyer, browser):  # noqa: F811
    token = session_token(foyer)
    suffix = uuid.uuid4().hex[:6]
    edited = create_task(foyer, token, f"To edit {suffix}")
    marked = create_task(foyer, token, f"To complete {suffix}")
    context, page = controlled_page(browser, foyer)
    for path in ["/tasks", f"/tasks/{edited['id']}", f"/tasks/{edited['id']}/edit", "/tasks/new"]:
        page.goto(foyer.url + path)
        page.locator("main h1").first.wait_for()
    context.set_offline(True)

    # A new task: the form opens from the kept copy, and the task waits in the list.
    page.goto(foyer.url + "/tasks/new")
    page.fill("input[name=title]", f"Made offline {suffix}")
    page.click("main button[type=submit]")
    page.wait_for_url(foyer.url + "/tasks")
    waiting = page.locator("li.waiting-write", has_text=f"Made offline {suffix}")
    waiting.wait_for()
    assert waiting.locator(".waiting-badge").inner_text() == "Not sent yet"
    screenshot(page, "waiting-write")

    # An edit: waits on the task's own page.
    page.goto(foyer.url + f"/tasks/{edited['id']}/edit")
    page.fill("input[name=title]", f"Edited offline {suffix}")
    page.click("main button[type=submit]")
    page.wait_for_url(foyer.url + f"/tasks/{edited['id']}")
    page.locator(".waiting-change", has_text=f"Edited offline {suffix}").wait_for()

    # A status change from the list (Turbo asks for a stream answer): waits on its row.
    page.goto(foyer.url + "/tasks")
    page.locator(f"#task_{marked['id']} button", has_text="Complete").click()
    # The worker's message may mark the row on the list being left, just before Turbo shows the list again: wait
    # for the list that stays to show both.
    wait_until(lambda: page.locator(f"#task_{marked['id']} .waiting-change", has_text="marked Complete").count() == 1
               and page.locator("li.waiting-write", has_text=f"Made offline {suffix}").count() == 1,
               what="the status change and the new task shown waiting on the list")
    assert [t for t in all_tasks(foyer, token) if suffix in t["title"] and "Made" in t["title"]] == []

    log_mark = len(pathlib.Path(foyer.log_path).read_text())
    context.set_offline(False)  # the page's `online` event sends them
    wait_until(lambda: page.locator(".waiting-write").count() == 0, what="the waiting writes to be sent")
    page.reload()
    page.locator("main h1").wait_for()
    for _ in range(2):  # more `online` events, as a flaky network gives: nothing is sent twice
        page.evaluate("window.dispatchEvent(new Event('online'))")
    page.goto(foyer.url + "/tasks")
    page.locator(f"#task_{marked['id']}[class*=status-COMPLETE]").wait_for()

    tasks = {t["id"]: t for t in all_tasks(foyer, token)}
    assert [t["title"] for t in tasks.values()].count(f"Made offline {suffix}") == 1
    assert tasks[edited["id"]]["title"] == f"Edited offline {suffix}"
    assert tasks[marked["id"]]["status"] == "COMPLETE"
    sent = writes_logged(foyer, log_mark)
    assert sent == ["POST /tasks 303", f"PATCH /tasks/{edited['id']} 303", f"POST /tasks/{marked['id']}/status 303"], sent
    context.close()


def test_an_edit_made_offline_to_a_task_changed_meanwhile_shows_the_conflict_page(foyer, browser):  # noqa: F811
    token = session_token(foyer)
    suffix = uuid.uuid4().hex[:6]
    task = create_task(foyer, token, f"Contested {suffix}")
    context, page = controlled_page(browser, foyer)
    page.goto(foyer.url + f"/tasks/{task['id']}/edit")
    page.locator("input[name=title]").wait_for()
    context.set_offline(True)
    page.fill("input[name=title]", f"Mine, offline {suffix}")
    page.click("main button[type=submit]")
    # The task's page was never opened here: the offline page lists the change as waiting.
    page.locator("#offline-waiting-list li", has_text=f"Mine, offline {suffix}").wait_for()

    code, body = post(foyer.url + "/graphql", {
        "query": "mutation($id: ID!, $v: Int!, $t: String) { updateTask(id: $id, version: $v, title: $t) { version } }",
        "variables": {"id": task["id"], "v": task["version"], "t": f"Theirs {suffix}"},
    }, token)
    assert code == 200 and b'"errors"' not in body, body

    context.set_offline(False)
    # The server's answer when the edit arrived, the same page an online edit gets: both versions, and the form.
    page.locator("#server-version").wait_for()
    assert f"Theirs {suffix}" in page.locator("#server-version").inner_text()
    assert f"Mine, offline {suffix}" in page.locator("#my-version").inner_text()
    screenshot(page, "refused-write")
    page.click("main button[type=submit]")  # save mine over theirs, as online
    page.wait_for_url(foyer.url + f"/tasks/{task['id']}")
    wait_until(lambda: next(t for t in all_tasks(foyer, token) if t["id"] == task["id"])["title"] == f"Mine, offline {suffix}",
               what="the edit saved over the latest")
    assert page.locator(".waiting-write").count() == 0
    context.close()


def test_a_post_written_offline_waits_at_the_top_of_the_list_then_is_published_once(server, browser):  # noqa: F811
    context, page = controlled_page(browser, server)
    for path in ["/posts", "/posts/new"]:
        page.goto(server.url + path)
        page.locator("main h1").first.wait_for()
    context.set_offline(True)
    title = f"Written offline {uuid.uuid4().hex[:6]}"
    page.goto(server.url + "/posts/new")
    page.fill("input[name=title]", title)
    page.fill("textarea[name=content]", "Typed in a tunnel.")
    page.click("main button[type=submit]")
    page.wait_for_url(server.url + "/posts")
    first = page.locator("ol.posts > li").first
    first.locator(".waiting-badge").wait_for()
    assert title in first.inner_text()
    context.set_offline(False)
    wait_until(lambda: page.locator(".waiting-write").count() == 0, what="the post to be sent")
    page.goto(server.url + "/posts")
    page.locator("ol.posts li", has_text=title).wait_for()
    assert page.locator("ol.posts li", has_text=title).count() == 1
    context.close()


def post_edited_offline_while_changed_elsewhere(server, browser, suffix: str, deleted: bool = False):  # noqa: F811
    """A post's edit saved offline in Chromium (at 390 px) while another device changes the same field (or deletes
    the post); back online, the queue sends it. Returns the context, the page, the post and the other device's token."""
    token = session_token(server)
    code, body = api(server, "POST", "/api/v1/posts", token, {"title": f"Agenda {suffix}", "content": "As it was."})
    assert code == 201, body
    created = json.loads(body)
    context = browser.new_context(timezone_id=ZONE, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    sign_in(page, server)
    wait_for_page(page, "navigator.serviceWorker.controller !== null", timeout=10000)
    for path in [f"/posts/{created['id']}", f"/posts/{created['id']}/edit"]:
        page.goto(server.url + path)
        page.locator("main h1, main article").first.wait_for()
    context.set_offline(True)
    page.fill("textarea[name=content]", f"Typed in a tunnel {suffix}.")
    page.click("main button[type=submit]")
    # Kept to send later, shown waiting on the post's page (its kept copy).
    page.locator(f"[data-waiting-item='/posts/{created['id']}'] .waiting-badge", has_text="Not sent yet").wait_for()

    if deleted:
        code, body = api(server, "DELETE", f"/api/v1/posts/{created['id']}", token, None, 'If-Match: "1"')
        assert code == 204, body
    else:
        code, body = api(server, "PATCH", f"/api/v1/posts/{created['id']}", token, {"content": f"Changed on the laptop {suffix}."}, 'If-Match: "1"')
        assert code == 200, body
    context.set_offline(False)
    return context, page, created, token


def api(server, method: str, path: str, token: str, body: dict | None = None, *headers: str) -> tuple[int, str]:
    args = ["-X", method, "-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/json"]
    for header in headers:
        args += ["-H", header]
    if body is not None:
        args += ["-d", json.dumps(body)]
    code, _, answer = curl_response(server.url + path, *args)
    return code, answer


def assert_nothing_waits(page, server):
    """The offline page, once it has listed what it keeps, lists no write waiting or refused."""
    page.goto(server.url + "/offline")
    page.locator("#offline-pages li").first.wait_for()
    assert page.locator("#offline-waiting-list li").count() == 0


def post_content(server, post_id, token) -> str:
    code, body = api(server, "GET", f"/api/v1/posts/{post_id}", token)
    assert code == 200, body
    return json.loads(body)["content"]


def test_a_post_edited_offline_never_goes_over_a_newer_change_and_what_was_typed_waits_to_be_saved(server, browser):  # noqa: F811
    suffix = uuid.uuid4().hex[:6]
    context, page, created, token = post_edited_offline_while_changed_elsewhere(server, browser, suffix)
    try:
        # The server's answer when the edit arrived: both versions, and the form with what was typed.
        page.locator("#server-version").wait_for()
        assert f"Changed on the laptop {suffix}." in page.locator("#server-version").inner_text()
        assert f"Typed in a tunnel {suffix}." in page.locator("#my-version").inner_text()
        assert page.input_value("textarea[name=content]") == f"Typed in a tunnel {suffix}."
        assert post_content(server, created["id"], token) == f"Changed on the laptop {suffix}.", "the other change intact"

        # The queue keeps it, labelled, on the post's page and on the offline page, until it is saved or discarded.
        page.goto(server.url + f"/posts/{created['id']}")
        entry = page.locator(f"[data-waiting-item='/posts/{created['id']}'] .refused-badge")
        entry.wait_for()
        assert entry.inner_text() == "Not saved: changed by someone else"
        screenshot(page, "post-not-saved")
        page.goto(server.url + "/offline")
        listed = page.locator("#offline-waiting-list li", has_text=f"Agenda {suffix}")
        listed.wait_for()
        assert "Not saved: changed by someone else" in listed.inner_text()
        screenshot(page, "offline-queue-not-saved")

        listed.locator("a").click()
        page.locator("#my-version").wait_for()
        assert page.input_value("textarea[name=content]") == f"Typed in a tunnel {suffix}."
        page.click("main button[type=submit]")
        page.locator("article.post .post-content", has_text=f"Typed in a tunnel {suffix}.").wait_for()
        assert post_content(server, created["id"], token) == f"Typed in a tunnel {suffix}."
        wait_until(lambda: page.locator(".refused-badge").count() == 0, what="the saved write to leave the queue")
        assert_nothing_waits(page, server)
    finally:
        context.close()


def test_a_refused_offline_edit_can_be_discarded(server, browser):  # noqa: F811
    suffix = uuid.uuid4().hex[:6]
    context, page, created, token = post_edited_offline_while_changed_elsewhere(server, browser, suffix)
    try:
        page.locator("#my-version").wait_for()
        page.click("[data-discard-write]")
        page.wait_for_url(server.url + f"/posts/{created['id']}")
        page.locator("article.post .post-content", has_text=f"Changed on the laptop {suffix}.").wait_for()
        wait_until(lambda: page.locator(".refused-badge").count() == 0, what="the discarded write to leave the page")
        assert post_content(server, created["id"], token) == f"Changed on the laptop {suffix}."
        assert_nothing_waits(page, server)
    finally:
        context.close()


def test_an_offline_edit_of_a_post_deleted_meanwhile_keeps_what_was_typed_to_publish_anew(server, browser):  # noqa: F811
    suffix = uuid.uuid4().hex[:6]
    context, page, created, token = post_edited_offline_while_changed_elsewhere(server, browser, suffix, deleted=True)
    try:
        page.locator("#post-deleted-notice").wait_for()
        assert "was deleted by its author" in page.locator("#post-deleted-notice").inner_text()
        assert page.input_value("textarea[name=content]") == f"Typed in a tunnel {suffix}."
        page.goto(server.url + "/offline")
        listed = page.locator("#offline-waiting-list li", has_text=f"Agenda {suffix}")
        listed.wait_for()
        assert "Not saved: it was deleted" in listed.inner_text()
        listed.locator("a").click()
        page.locator("#post-deleted-notice").wait_for()
        page.click("main button[type=submit]")  # "Publish": what was typed, as a new post
        page.locator("article.post .post-content", has_text=f"Typed in a tunnel {suffix}.").wait_for()
        assert page.url != server.url + f"/posts/{created['id']}"
        wait_until(lambda: page.evaluate("navigator.serviceWorker.controller !== null"), what="the worker")
        assert_nothing_waits(page, server)
    finally:
        context.close()


def kept_page_caches(page) -> list[str]:
    return page.evaluate("caches.keys().then(names => names.filter(name => name.startsWith('foyer-pages-')))")


def test_after_sign_out_nothing_of_the_first_person_opens_offline_and_the_next_sees_only_their_own(server, browser):  # noqa: F811
    token = session_token(server)
    task = create_task(server, token, f"Private {uuid.uuid4().hex[:6]}")
    context, page = controlled_page(browser, server)
    for path in ["/tasks", f"/tasks/{task['id']}"]:
        page.goto(server.url + path)
        page.locator("main h1").first.wait_for()

    with page.expect_response(lambda response: response.url.endswith("/sign_out")) as signed_out:
        page.locator("nav button", has_text="Sign out").click()
    assert signed_out.value.all_headers().get("clear-site-data") == '"cache", "storage"'
    page.wait_for_url(server.url + "/")
    # The storage the header cleared took the worker with it; the page registers it afresh.
    wait_for_page(page, "navigator.serviceWorker.controller !== null", timeout=10000)
    context.set_offline(True)
    for path in ["/tasks", f"/tasks/{task['id']}"]:
        page.goto(server.url + path)
        page.locator("#offline-page").wait_for()
        assert task["title"] not in page.locator("main").inner_text()
    context.set_offline(False)
    page.locator("#offline-page").wait_for(state="detached")  # back online, it becomes the page asked for

    # Someone else signs in on this browser: only their own pages open offline.
    email = f"next-{uuid.uuid4().hex[:6]}@foyer.test"
    add_user(server, email, "next person password")
    sign_in(page, server, email, "next person password")
    page.goto(server.url + "/tasks/new")
    page.locator("main h1").wait_for()
    context.set_offline(True)
    page.goto(server.url + "/tasks/new")
    assert notice(page).startswith("Offline — showing this page as it was at ")
    page.goto(server.url + f"/tasks/{task['id']}")
    page.locator("#offline-page").wait_for()
    assert page.locator("#offline-pages a[href='/tasks']").count() == 0
    context.set_offline(False)
    page.locator("#offline-page").wait_for(state="detached")  # back online, the offline page becomes the task's

    # A session lost without signing out (its cookie gone), then another person: the worker itself drops the pages
    # of the one before, with no Clear-Site-Data to do it.
    context.clear_cookies()
    sign_in(page, server)
    page.goto(server.url + "/tasks")
    page.locator("main h1").wait_for()
    mine = [name for name in kept_page_caches(page) if name != "foyer-pages-public"]
    assert len(mine) == 1, mine
    context.close()


def test_a_session_revoked_elsewhere_leaves_no_page_of_its_person_offline(server, browser):  # noqa: F811
    context, page = controlled_page(browser, server)
    page.goto(server.url + "/tasks")
    page.locator("main h1").wait_for()
    revoke(server, session_token(server), browser_session_id(server, context))
    page.wait_for_url(server.url + "/sign_in")  # the stream's last event
    page.locator("main input[name=password]").wait_for()
    # Dropped, not merely hidden: only pages anyone may read are left.
    wait_until(lambda: set(kept_page_caches(page)) <= {"foyer-pages-public"}, what="the person's kept pages to be dropped")
    context.set_offline(True)
    page.goto(server.url + "/tasks")
    page.locator("#offline-page").wait_for()
    context.close()


def test_offline_false_serves_a_worker_that_removes_itself(tmp_path, browser):  # noqa: F811
    for folder in ("on", "off"):
        (tmp_path / folder).mkdir()
    running = RunningServer(tmp_path / "on")
    try:
        context = browser.new_context()
        page = context.new_page()
        page.goto(running.url + "/posts")
        wait_for_page(page, "navigator.serviceWorker.controller !== null", timeout=10000)
        assert page.evaluate("caches.keys()") != []
    finally:
        running.stop()
    # The same address, offline turned off: pages no longer load the script, and the worker, on its next update
    # check, replaces itself with one that drops every cache and unregisters.
    running = RunningServer(tmp_path / "off", port=running.port, extra_args=["--offline", "false"])
    try:
        page.goto(running.url + "/posts")
        assert page.locator("script[src='/offline.js']").count() == 0
        page.evaluate("navigator.serviceWorker.getRegistration().then(registration => registration && registration.update())")
        wait_until(lambda: page.evaluate("navigator.serviceWorker.getRegistrations().then(all => all.length)") == 0,
                   what="the worker to unregister itself")
        assert page.evaluate("caches.keys()") == []
    finally:
        running.stop()
        context.close()


def test_a_native_shells_page_marks_its_webview_so_the_workers_requests_render_native_too(server, browser):  # noqa: F811
    context = browser.new_context(user_agent=NATIVE_USER_AGENT)
    page = context.new_page()
    page.goto(server.url + "/posts")
    wait_for_page(page, "document.cookie.split('; ').includes('native_shell=1')")
    # A worker's request carries the WebView's default User-Agent (curl's, here) and the WebView's cookies.
    _, _, plain = curl_response(server.url + "/posts")
    _, _, marked = curl_response(server.url + "/posts", "-H", "Cookie: native_shell=1")
    assert '<body class="native">' not in plain
    assert '<body class="native">' in marked
    context.close()

    web = browser.new_context()
    page = web.new_page()
    page.goto(server.url + "/posts")
    wait_for_page(page, "navigator.serviceWorker.controller !== null", timeout=10000)
    assert "native_shell" not in page.evaluate("document.cookie")
    web.close()


def test_kept_pages_are_bounded_in_number_and_age(tmp_path, browser):  # noqa: F811
    rules = json.loads((REPO / "path_configuration.json").read_text())
    rules["settings"] = {"offline_max_entries": 2, "offline_max_age": 3}
    (tmp_path / "path_configuration.json").write_text(json.dumps(rules))
    running = RunningServer(tmp_path, extra_args=["--path-configuration", str(tmp_path / "path_configuration.json")])
    try:
        context = browser.new_context()
        page = context.new_page()
        page.goto(running.url + "/posts")
        wait_for_page(page, "navigator.serviceWorker.controller !== null", timeout=10000)
        for path in ["/posts", "/posts?page=2", "/posts?page=3"]:
            page.goto(running.url + path)
            page.locator("main h1").wait_for()
        context.set_offline(True)
        # Two kept, the oldest dropped: the newest two open, the first does not.
        page.goto(running.url + "/posts?page=3")
        assert notice(page).startswith("Offline")
        page.goto(running.url + "/posts?page=2")
        assert notice(page).startswith("Offline")
        page.goto(running.url + "/posts")
        page.locator("#offline-page").wait_for()

        # Three seconds after it was kept, a copy is too old to show.
        def too_old():
            page.goto(running.url + "/posts?page=3")
            page.locator("main h1").first.wait_for()
            return page.locator("#offline-page").count() == 1
        wait_until(too_old, seconds=10, what="the kept copy to age out")
        context.close()
    finally:
        running.stop()
