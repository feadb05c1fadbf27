"""Real Chromium through Playwright: the sign-in a person does, and what a native shell's WebView sees."""
import pytest
from playwright.sync_api import sync_playwright

from conftest import DEMO_EMAIL, DEMO_PASSWORD, wait_for_page

NATIVE_USER_AGENT = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Hotwire Native iOS; Turbo Native iOS"


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        yield chromium
        chromium.close()


def test_sign_in_lands_on_the_page_first_asked_for_then_sign_out(server, browser):
    page = browser.new_page()
    response = page.goto(server.url + "/account")
    assert response.status == 401
    assert page.locator("h1").inner_text() == "Sign in"
    wait_for_page(page, "window.Turbo !== undefined")
    # Survives only if Turbo Drive handles the form: a full page load would reset it.
    page.evaluate("window.stillTheSamePage = true")

    page.fill("input[name=email]", DEMO_EMAIL)
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(server.url + "/account")
    page.locator("#account-email").wait_for()
    assert page.locator("#account-email").inner_text() == DEMO_EMAIL
    assert page.evaluate("window.stillTheSamePage") is True
    assert "This device" in page.content()

    page.click("nav button:has-text('Sign out')")
    page.wait_for_url(server.url + "/")
    page.locator("nav a[href='/sign_in']").wait_for()
    assert page.goto(server.url + "/account").status == 401
    page.close()


def test_wrong_password_shows_the_message_without_leaving_the_form(server, browser):
    page = browser.new_page()
    page.goto(server.url + "/sign_in")
    wait_for_page(page, "window.Turbo !== undefined")
    page.fill("input[name=email]", DEMO_EMAIL)
    page.fill("input[name=password]", "not the password")
    page.click("button[type=submit]")
    page.locator(".flash").wait_for()
    assert "That email or password is incorrect" in page.locator(".flash").inner_text()
    assert page.input_value("input[name=email]") == DEMO_EMAIL
    page.close()


def test_native_shell_sees_no_web_navigation(server, browser):
    context = browser.new_context(user_agent=NATIVE_USER_AGENT)
    page = context.new_page()
    response = page.goto(server.url + "/sign_in")
    assert response.status == 200
    assert response.headers["vary"] == "User-Agent, Accept-Language, Accept-Encoding"
    assert page.locator("nav.site-nav").count() == 0
    assert page.locator("form[action='/sign_in']:not(#passkey-form)").is_visible()
    context.close()

    web = browser.new_page()
    web.goto(server.url + "/sign_in")
    assert web.locator("nav.site-nav").is_visible()
    web.close()


def test_token_hand_over_signs_the_webview_in(server, browser):
    context = browser.new_context(user_agent=NATIVE_USER_AGENT)
    api = context.request.post(server.url + "/api/v1/sessions", data={"email": DEMO_EMAIL, "password": DEMO_PASSWORD})
    assert api.status == 201
    token = api.headers["x-session-token"]
    # What a native app does after signing in natively: load the hand-over in its WebView, with its token.
    fresh = browser.new_context(user_agent=NATIVE_USER_AGENT, extra_http_headers={"Authorization": f"Bearer {token}"})
    page = fresh.new_page()
    page.goto(server.url + "/api/v1/session/cookie?return_to=/account")
    assert page.url == server.url + "/account"
    assert page.locator("#account-email").inner_text() == DEMO_EMAIL
    cookies = {cookie["name"]: cookie for cookie in fresh.cookies()}
    assert cookies["foyer_session"]["httpOnly"] is True
    assert cookies["foyer_session"]["value"] == token
    fresh.close()
    context.close()
