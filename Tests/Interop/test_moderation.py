"""Moderation as people meet it in Chromium: a report from a post page at phone width, the queue, a removal that
leaves an open list in another browser without a reload, and the mail each person gets (aiosmtpd); a block made on
a profile; a provider-less account that must accept the terms before it posts."""
import json
import os
import pathlib
import subprocess

import pytest

from conftest import RunningServer, curl_response, foyer_binary, wait_for_page
from test_accounts import SMTPPeer, socket_close_code_after, text_of
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_live import RawStream, add_user, follow, get, stream_path
from test_pictures import camera_jpeg, upload
from test_posts_browser import sign_in

PHONE = {"width": 390, "height": 844}
AUTHOR, READER, MODERATOR = ("alice@foyer.test", "alice's own words"), ("rob@foyer.test", "rob's own words"), ("mona@foyer.test", "mona's own words")


@pytest.fixture(scope="module")
def plain_smtp(tmp_path_factory):
    peer = SMTPPeer(tmp_path_factory.mktemp("smtp-moderation"))
    peer.start()
    yield peer
    peer.stop()


@pytest.fixture(scope="module")
def moderated(tmp_path_factory, plain_smtp):
    running = RunningServer(
        tmp_path_factory.mktemp("foyer-moderation"), extra_args=[*plain_smtp.foyer_args(), "--contact-email", "help@foyer.test"],
    )
    for email, password in (AUTHOR, READER, MODERATOR):
        add_user(running, email, password)
    made = subprocess.run(
        [foyer_binary(), "user", "role", MODERATOR[0], "moderator", "--database", str(running.database)], capture_output=True, text=True, timeout=60,
    )
    assert made.returncode == 0 and "is now a moderator" in made.stdout, made.stderr
    yield running
    running.stop()


def token_of(server, email: str, password: str) -> str:
    status, headers, body = curl_response(
        server.url + "/api/v1/sessions", "-H", "Content-Type: application/json", "--data", json.dumps({"email": email, "password": password}),
    )
    assert status == 201, body
    return headers["x-session-token"]


def api(server, method: str, path: str, token: str, body=None) -> tuple[int, dict | list]:
    args = ["-X", method, "-H", f"Authorization: Bearer {token}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data", json.dumps(body)]
    status, _, text = curl_response(server.url + path, *args)
    return status, (json.loads(text) if text.strip() else {})


def screenshots(tmp_path) -> pathlib.Path:
    """Where the note's screenshots go: $FOYER_SCREENSHOTS, else the test's own folder."""
    folder = pathlib.Path(os.environ.get("FOYER_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_a_report_from_a_phone_reaches_the_queue_and_the_removal_leaves_an_open_list(moderated, plain_smtp, browser, tmp_path):  # noqa: F811
    shots = screenshots(tmp_path)
    author = token_of(moderated, *AUTHOR)
    photo = tmp_path / "pills.jpg"
    photo.write_bytes(camera_jpeg())
    status, post = upload(moderated.url, author, photo, "Cheap pills, no prescription", alt="A box of pills")
    assert status == 201, post

    watcher_context = browser.new_context()
    reader_context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    moderator_context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        watcher = watcher_context.new_page()
        follow(watcher, moderated.url + "/posts")
        assert watcher.locator(f"#post_{post['id']}").count() == 1

        reader = reader_context.new_page()
        sign_in(reader, moderated, *READER)
        reader.goto(f"{moderated.url}/posts/{post['id']}")
        wait_for_page(reader, "window.Turbo !== undefined")
        reader.click("#report-post")
        reader.wait_for_url(f"{moderated.url}/posts/{post['id']}/report")
        reader.locator("#report-form").wait_for()
        assert reader.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], "nothing wider than the phone"
        reader.screenshot(path=str(shots / "report-sheet-390.png"), full_page=True)
        reader.check("input[name=reason][value=spam]")
        reader.fill("#report-comment", "Selling pills to strangers")
        reader.click("#report-form button[type=submit]")
        reader.wait_for_url(f"{moderated.url}/posts/{post['id']}")
        reader.locator(".notice", has_text="your report is with the moderators").wait_for()

        [alert] = plain_smtp.wait_for(MODERATOR[0])
        assert "New report" in alert["message"]["Subject"] and "Selling pills to strangers" in text_of(alert["message"])

        moderator = moderator_context.new_page()
        sign_in(moderator, moderated, *MODERATOR)
        moderator.goto(moderated.url + "/moderation")
        entry = moderator.locator(".queue-entry").first
        entry.wait_for()
        assert "Cheap pills, no prescription" in entry.inner_text() and "by 1 person" in entry.inner_text()
        # The picture the report kept, shown from the report's own copy.
        kept = entry.locator("img.kept-picture")
        wait_for_page(moderator, "document.querySelector('img.kept-picture')?.naturalWidth > 0")
        assert kept.get_attribute("alt") == "A box of pills"
        moderator.screenshot(path=str(shots / "moderation-queue-390.png"), full_page=True)
        entry.locator("textarea[name=note]").fill("Selling medicine breaks the terms.")
        entry.locator("button[value=remove_post]").click()
        moderator.locator(".notice", has_text="the reports on it are closed").wait_for()
        assert moderator.locator(".queue-entry").count() == 0

        # The open list in another browser lets the post go, without a reload.
        watcher.locator(f"#post_{post['id']}").wait_for(state="detached", timeout=10_000)
        assert watcher.evaluate("window.neverReloaded") is True
        assert curl_response(f"{moderated.url}/api/v1/posts/{post['id']}")[0] == 404
        assert api(moderated, "GET", f"/api/v1/posts/{post['id']}", author)[0] == 200, "its author still sees it"

        [removed] = plain_smtp.wait_for(AUTHOR[0])
        body = text_of(removed["message"])
        assert removed["message"]["Subject"] == "Your post was removed" and "Selling medicine breaks the terms." in body
        assert "help@foyer.test" in body and "rob" not in body.lower(), "how to appeal, never who reported"
        [handled] = plain_smtp.wait_for(READER[0])
        assert handled["message"]["Subject"] == "Your report was handled"
        status, log = api(moderated, "GET", "/api/v1/moderation/audit", token_of(moderated, *MODERATOR))
        assert status == 200 and log[0]["action"] == "remove_post" and log[0]["note"] == "Selling medicine breaks the terms."
    finally:
        for context in (watcher_context, reader_context, moderator_context):
            context.close()


def test_a_block_made_on_a_profile_keeps_the_two_apart(moderated, browser, tmp_path):  # noqa: F811
    shots = screenshots(tmp_path)
    author, reader = token_of(moderated, *AUTHOR), token_of(moderated, *READER)
    status, theirs = api(moderated, "POST", "/api/v1/posts", author, {"title": "Alice again", "content": "Still here."})
    assert status == 201
    status, mine = api(moderated, "POST", "/api/v1/posts", reader, {"title": "Rob's own post", "content": "Hello."})
    assert status == 201

    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        sign_in(page, moderated, *READER)
        # The reader's list, open in a second tab before the block: her post leaves it without a reload.
        open_list = context.new_page()
        follow(open_list, moderated.url + "/posts")
        assert open_list.locator(f"#post_{theirs['id']}").count() == 1
        page.goto(f"{moderated.url}/posts/{theirs['id']}")
        page.click(".author-link")
        page.wait_for_url(f"{moderated.url}/users/{theirs['author']['id']}")
        page.locator("#block-user").wait_for()
        page.screenshot(path=str(shots / "profile-with-block-390.png"), full_page=True)
        page.click("#block-user")
        page.wait_for_url(moderated.url + "/posts")
        page.locator(".notice", has_text="Blocked").wait_for()
        assert page.locator(f"#post_{theirs['id']}").count() == 0 and page.locator(f"#post_{mine['id']}").count() == 1
        open_list.locator(f"#post_{theirs['id']}").wait_for(state="detached", timeout=10_000)
        assert open_list.evaluate("window.neverReloaded") is True

        # Her next post never reaches the reader's open list, while a third person's does.
        follow(page, moderated.url + "/posts")
        status, hers = api(moderated, "POST", "/api/v1/posts", author, {"title": "Alice after the block", "content": "Unseen."})
        assert status == 201
        status, third = api(moderated, "POST", "/api/v1/posts", token_of(moderated, *MODERATOR), {"title": "Mona's news", "content": "Seen."})
        assert status == 201
        for open_page in (page, open_list):
            open_page.locator(f"#post_{third['id']}").wait_for(timeout=10_000)
            assert open_page.locator(f"#post_{hers['id']}").count() == 0 and open_page.evaluate("window.neverReloaded") is True
    finally:
        context.close()
    # Both ways: the blocked person, signed in, gets 404 for the blocker's post; signed out, everyone sees both.
    assert api(moderated, "GET", f"/api/v1/posts/{mine['id']}", author)[0] == 404
    assert api(moderated, "GET", f"/api/v1/posts/{theirs['id']}", reader)[0] == 404
    assert curl_response(f"{moderated.url}/api/v1/posts/{theirs['id']}")[0] == 200
    status, blocks = api(moderated, "GET", "/api/v1/blocks", reader)
    assert status == 200 and [block["user"]["id"] for block in blocks] == [theirs["author"]["id"]]
    assert api(moderated, "DELETE", f"/api/v1/blocks/{theirs['author']['id']}", reader)[0] == 204
    assert api(moderated, "GET", f"/api/v1/posts/{theirs['id']}", reader)[0] == 200


def test_an_account_that_has_not_accepted_the_terms_reads_but_posts_only_after_accepting(moderated, browser):  # noqa: F811
    # Accepting the terms is what a provider's account must do first; a sign-up without them is refused.
    status, _, body = curl_response(
        moderated.url + "/api/v1/users", "-H", "Content-Type: application/json",
        "--data", json.dumps({"name": "Nora", "email": "nora@foyer.test", "password": "nora's fine words"}),
    )
    assert status == 422 and json.loads(body)["errors"] == {"accept_terms": ["must be accepted"]}
    status, _, body = curl_response(moderated.url + "/terms", "-H", "Accept: application/json")
    terms = json.loads(body)
    assert status == 200 and "Zero tolerance" in terms["html"] and terms["contact_email"] == "help@foyer.test"
    page = browser.new_page()
    try:
        page.goto(moderated.url + "/posts")
        assert page.locator("footer a[href='/terms']").count() == 1 and page.locator("footer a[href='/contact']").count() == 1
        page.click("footer a[href='/contact']")
        page.wait_for_url(moderated.url + "/contact")
        # Turbo Drive moves the address before it swaps the page in: wait for the page itself.
        page.locator("main", has_text="help@foyer.test").wait_for()
    finally:
        page.close()


def test_a_suspension_ends_the_accounts_stream_and_websocket_and_refuses_it_until_lifted(moderated):
    abuser = ("sid@foyer.test", "sid's own words")
    add_user(moderated, *abuser)
    token = token_of(moderated, *abuser)
    status, post = api(moderated, "POST", "/api/v1/posts", token, {"title": "Sid's post", "content": "Words."})
    assert status == 201
    status, report = api(moderated, "POST", "/api/v1/reports", token_of(moderated, *READER), {"user_id": post["author"]["id"], "reason": "harassment"})
    assert status == 201
    _, html = get(moderated.url + "/tasks", headers={"Authorization": f"Bearer {token}"})
    stream = RawStream(moderated, stream_path(html), headers=[f"Authorization: Bearer {token}"])

    def suspend():
        status, outcome = api(
            moderated, "POST", f"/api/v1/moderation/reports/{report['id']}/actions", token_of(moderated, *MODERATOR),
            {"action": "suspend_user", "note": "Harassing other people."},
        )
        assert status == 200, outcome

    try:
        assert socket_close_code_after(moderated, token, stream, suspend) == 4401
        assert b"event: signed-out" in stream.read_to_end()
    finally:
        stream.close()
    assert api(moderated, "GET", "/api/v1/me", token)[0] == 401
    status, _, body = curl_response(
        moderated.url + "/api/v1/sessions", "-H", "Content-Type: application/json", "--data", json.dumps({"email": abuser[0], "password": abuser[1]}),
    )
    assert status == 403 and json.loads(body)["error"] == "account_suspended"
    assert curl_response(f"{moderated.url}/api/v1/posts/{post['id']}")[0] == 404, "their posts are hidden"
    status, outcome = api(
        moderated, "POST", f"/api/v1/moderation/reports/{report['id']}/actions", token_of(moderated, *MODERATOR), {"action": "unsuspend", "note": ""},
    )
    assert status == 200, outcome
    assert token_of(moderated, *abuser)
    assert curl_response(f"{moderated.url}/api/v1/posts/{post['id']}")[0] == 200
