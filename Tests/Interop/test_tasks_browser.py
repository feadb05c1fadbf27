"""Chromium creates a task through the form, finds it in the list and changes its status."""
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_posts_browser import sign_in


def test_create_a_task_see_it_listed_and_complete_it(server, browser):  # noqa: F811
    page = browser.new_page()
    sign_in(page, server)
    page.goto(server.url + "/tasks/new")
    page.locator("input[name=title]").wait_for()
    page.fill("input[name=title]", "Buy milk in Chromium")
    page.fill("textarea[name=description]", "Two litres")
    page.click("main button[type=submit]")
    page.locator("article.task h1").wait_for()
    assert page.locator("article.task h1").inner_text() == "Buy milk in Chromium"

    page.click("a[href='/tasks']")
    page.wait_for_url(server.url + "/tasks")
    row = page.locator("li.task", has_text="Buy milk in Chromium")
    assert row.locator("[aria-current]").inner_text() == "Open"
    row.locator("button", has_text="Mark Complete").click()
    page.locator("li.task", has_text="Buy milk in Chromium").locator("[aria-current][data-status=COMPLETE]").wait_for()
    page.close()
