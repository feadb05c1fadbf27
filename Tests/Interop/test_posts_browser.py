"""Chromium writes, edits and fails to save a post through the pages, with Turbo Drive doing the navigation."""
from conftest import DEMO_EMAIL, DEMO_PASSWORD, wait_for_page
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)


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
