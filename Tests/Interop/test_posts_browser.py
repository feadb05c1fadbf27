"""Chromium writes, edits and fails to save a post through the pages, with Turbo Drive doing the navigation."""
import contextlib
import json
import os
import pathlib
import urllib.request

from conftest import DEMO_EMAIL, DEMO_PASSWORD, wait_for_page
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_graphql import session_token


def sign_in(page, server, email: str = DEMO_EMAIL, password: str = DEMO_PASSWORD):
    page.goto(server.url + "/sign_in")
    wait_for_page(page, "window.Turbo !== undefined")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("main button[type=submit]")
    page.wait_for_url(server.url + "/")


def test_create_see_in_list_edit_and_invalid_form(server, browser):  # noqa: F811
    page = browser.new_page()
    sign_in(page, server)
    page.goto(server.url + "/posts")
    wait_for_page(page, "window.Turbo !== undefined")
    page.evaluate("window.stillTheSamePage = true")

    page.click("a[href='/posts/new']")
    page.wait_for_url(server.url + "/posts/new")
    page.locator("input[name=title]").wait_for()
    page.fill("input[name=title]", "Written in Chromium")
    page.fill("textarea[name=content]", "First paragraph.\n\nSecond paragraph.")
    page.click("main button[type=submit]")
    page.locator("article.post h1").wait_for()
    assert page.locator("article.post h1").inner_text() == "Written in Chromium"
    assert page.locator(".post-content p").count() == 2
    post_url = page.url

    page.click("a[href='/posts']")
    page.wait_for_url(server.url + "/posts")
    assert page.locator("ol.posts li .post-title").first.inner_text() == "Written in Chromium"
    # Every step above was a Turbo Drive visit or form submission: the window was never reloaded.
    assert page.evaluate("window.stillTheSamePage") is True

    page.goto(post_url)
    page.click("a:has-text('Edit')")
    page.wait_for_url(post_url + "/edit")
    page.locator("input[name=title]").wait_for()
    page.fill("input[name=title]", "Edited in Chromium")
    page.click("main button[type=submit]")
    page.wait_for_url(post_url)
    page.locator("article.post h1:has-text('Edited in Chromium')").wait_for()

    page.click("a:has-text('Edit')")
    page.wait_for_url(post_url + "/edit")
    page.locator("input[name=title]").wait_for()
    # The form page is never a Turbo preview (turbo-cache-control: no-cache), so typing here is not lost.
    assert page.evaluate("document.documentElement.hasAttribute('data-turbo-preview')") is False
    # Defeat the browser's own `required` check so the server's validation answers.
    page.evaluate("document.querySelector('input[name=title]').removeAttribute('required')")
    page.fill("input[name=title]", "   ")
    with page.expect_response(lambda response: response.request.method == "POST") as submitted:
        page.click("main button[type=submit]")
    assert submitted.value.status == 422
    page.locator("#error-explanation").wait_for()
    assert "Title can't be blank" in page.locator("#error-explanation").inner_text()
    assert page.locator("input[name=title]").get_attribute("aria-invalid") == "true"
    page.close()


@contextlib.contextmanager
def two_devices_editing(server, browser, title: str, content: str):  # noqa: F811
    """A post of the demo account's, open in its edit form on a laptop and on a phone (390 px), signed in on both."""
    token = session_token(server)
    request = urllib.request.Request(
        server.url + "/api/v1/posts", method="POST", data=json.dumps({"title": title, "content": content}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        created = json.load(response)
    laptop_context = browser.new_context()
    phone_context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        laptop, phone = laptop_context.new_page(), phone_context.new_page()
        for page in (laptop, phone):
            sign_in(page, server)
            page.goto(f"{server.url}/posts/{created['id']}/edit")
            page.locator("textarea[name=content]").wait_for()
        yield laptop, phone
    finally:
        laptop_context.close()
        phone_context.close()


def test_two_devices_editing_one_post_meet_the_conflict_page_and_save_from_it(server, browser, tmp_path):  # noqa: F811
    """The author on a laptop and on a phone edits the same field from the same read: the second save shows both
    versions, keeps what was typed, and lands when saved again; the first device's words are never lost unseen.
    While the phone's form is open, the laptop's save is announced in it, and what the phone typed stays."""
    with two_devices_editing(server, browser, "Shared plans", "Meet at noon.") as (laptop, phone):
        phone.fill("textarea[name=content]", "Meet at two, typed on the phone.")
        assert phone.locator("[id$=_changed][role=status]").count() == 0
        laptop.fill("textarea[name=content]", "Meet at one, on the laptop.")
        laptop.click("main button[type=submit]")
        laptop.locator("article.post .post-content", has_text="Meet at one, on the laptop.").wait_for()

        notice = phone.locator("form [id$=_changed][role=status]")
        notice.wait_for()
        assert "demo saved a newer version of this post just now" in notice.inner_text()
        assert phone.input_value("textarea[name=content]") == "Meet at two, typed on the phone."
        with phone.expect_response(lambda response: response.request.method == "POST") as submitted:
            phone.click("main button[type=submit]")
        assert submitted.value.status == 409
        phone.locator("h1", has_text="Someone changed this post").wait_for()
        assert "Meet at one, on the laptop." in phone.locator("#server-version").inner_text()
        assert "Meet at two, typed on the phone." in phone.locator("#my-version").inner_text()
        assert phone.input_value("textarea[name=content]") == "Meet at two, typed on the phone."
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390, "nothing wider than the phone"
        shots = pathlib.Path(os.environ.get("FOYER_SCREENSHOTS") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        phone.screenshot(path=str(shots / "post-conflict-390.png"), full_page=True)

        phone.click("main button[type=submit]")
        phone.locator("article.post .post-content", has_text="Meet at two, typed on the phone.").wait_for()


def test_two_devices_changing_different_fields_of_one_post_are_merged(server, browser):  # noqa: F811
    with two_devices_editing(server, browser, "Trip", "Pack light.") as (laptop, phone):
        laptop.fill("input[name=title]", "Trip to the coast")
        laptop.click("main button[type=submit]")
        laptop.locator("article.post h1", has_text="Trip to the coast").wait_for()
        phone.fill("textarea[name=content]", "Pack light, and a raincoat.")
        phone.click("main button[type=submit]")
        phone.locator("#flash", has_text="together with the change you saved meanwhile").wait_for()
        assert phone.locator("article.post h1").inner_text() == "Trip to the coast"
        assert "Pack light, and a raincoat." in phone.locator("article.post .post-content").inner_text()
