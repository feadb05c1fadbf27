"""Passkeys in real Chromium, with the DevTools protocol's virtual authenticator (a platform authenticator with
user verification, holding discoverable credentials): added on the account page, then signing in by the button and
by the browser's autofill; an authenticator that lies about presence, verification or its signature is refused.

WebAuthn needs a secure context: http://localhost is one, http://127.0.0.1 with an RP ID is not a domain, so the
pages are opened at localhost."""
import os
import pathlib
import sqlite3

import pytest

from conftest import DEMO_EMAIL, DEMO_PASSWORD, RunningServer, wait_for_page, wait_until
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)

SCREENSHOTS = os.environ.get("FOYER_SCREENSHOTS")


@pytest.fixture(scope="module")
def passkey_server(tmp_path_factory):
    running = RunningServer(tmp_path_factory.mktemp("passkeys"))
    running.local = running.url.replace("127.0.0.1", "localhost")
    yield running
    running.stop()


def screenshot(page, name, part: str | None = None):
    if SCREENSHOTS:
        pathlib.Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        if part:
            # The part at the top of the screen, below the sticky navigation.
            page.evaluate(f"document.querySelector('{part}').scrollIntoView(); window.scrollBy(0, -64)")
            page.screenshot(path=f"{SCREENSHOTS}/{name}.png")
        else:
            page.screenshot(path=f"{SCREENSHOTS}/{name}.png", full_page=True)


def with_authenticator(context, page):
    """A virtual platform authenticator for `page`: its CDP session and id."""
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable", {"enableUI": False})
    added = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
        "protocol": "ctap2", "ctap2Version": "ctap2_1", "transport": "internal", "hasResidentKey": True,
        "hasUserVerification": True, "isUserVerified": True, "automaticPresenceSimulation": True,
    }})
    return cdp, added["authenticatorId"]


def sign_in_with_password(page, server):
    page.goto(server.local + "/sign_in")
    wait_for_page(page, "window.Turbo !== undefined")
    page.fill("main form:not(#passkey-form) input[name=email]", DEMO_EMAIL)
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("main form:not(#passkey-form) button[type=submit]")
    page.wait_for_url(server.local + "/")


def add_passkey(page, server, name: str):
    page.goto(server.local + "/account")
    page.locator("#add-passkey").wait_for()
    page.fill("#new-passkey-name", name)
    page.click("#add-passkey")
    page.locator("#passkey-list .passkey-name", has_text=name).wait_for()


def sign_out(page, server):
    """From the account page (a phone's width hides the navigation's button): this device's "Sign out"."""
    page.goto(server.local + "/account")
    page.locator("#devices").get_by_role("button", name="Sign out", exact=True).click()
    wait_until(lambda: not any(cookie["name"] == "foyer_session" for cookie in page.context.cookies()), what="the session cookie to go")


def sign_count(server, name: str) -> int:
    with sqlite3.connect(server.database) as db:
        return db.execute("SELECT sign_count FROM passkeys WHERE name = ?", (name,)).fetchone()[0]


def sessions(server) -> int:
    with sqlite3.connect(server.database) as db:
        return db.execute("SELECT count(*) FROM sessions WHERE revoked_at IS NULL").fetchone()[0]


def test_a_passkey_added_on_the_account_page_signs_in_by_button_and_by_autofill(passkey_server, browser):  # noqa: F811
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    cdp, authenticator = with_authenticator(context, page)
    try:
        sign_in_with_password(page, passkey_server)
        add_passkey(page, passkey_server, "Laptop")
        # The same authenticator again: the options exclude the passkey it holds, and the browser refuses.
        page.click("#add-passkey")
        page.locator("#passkey-error").wait_for()
        assert page.locator("#passkey-list .passkey").count() == 1
        # A second authenticator (another device) makes a second passkey.
        cdp.send("WebAuthn.removeVirtualAuthenticator", {"authenticatorId": authenticator})
        cdp, authenticator = with_authenticator(context, page)
        add_passkey(page, passkey_server, "Phone")
        assert page.locator("#passkey-list .passkey").count() == 2
        screenshot(page, "account-two-passkeys-390", part="#passkeys")

        # Autofill: the page arms a conditional request as it opens; Chromium's virtual authenticator answers it
        # at once, as a person picking the passkey the email field offers would.
        sign_out(page, passkey_server)
        page.goto(passkey_server.local + "/sign_in")
        page.wait_for_url(passkey_server.local + "/")
        page.goto(passkey_server.local + "/account")
        assert page.locator("#account-email").inner_text() == DEMO_EMAIL
        assert "last used" in page.locator("#passkey-list .passkey", has_text="Phone").inner_text()

        # The button, in a browser without autofill for passkeys.
        sign_out(page, passkey_server)
        page.add_init_script("PublicKeyCredential.isConditionalMediationAvailable = async () => false")
        page.goto(passkey_server.local + "/sign_in")
        page.locator("#passkey-sign-in").wait_for()
        assert page.get_attribute("input[name=email]", "autocomplete") == "username webauthn"
        screenshot(page, "sign-in-with-passkey-390")
        page.click("#passkey-sign-in")
        page.wait_for_url(passkey_server.local + "/")
        page.goto(passkey_server.local + "/account")
        assert page.locator("#account-email").inner_text() == DEMO_EMAIL
    finally:
        context.close()


@pytest.mark.parametrize("override", ["isBadUP", "isBadUV", "isBogusSignature"])
def test_an_authenticator_that_lies_is_refused_and_nothing_changes(passkey_server, browser, override):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    cdp, authenticator = with_authenticator(context, page)
    name = f"Liar {override}"
    try:
        sign_in_with_password(page, passkey_server)
        add_passkey(page, passkey_server, name)
        sign_out(page, passkey_server)
        before = (sign_count(passkey_server, name), sessions(passkey_server))
        cdp.send("WebAuthn.setResponseOverrideBits", {"authenticatorId": authenticator, override: True})
        page.add_init_script("PublicKeyCredential.isConditionalMediationAvailable = async () => false")
        page.goto(passkey_server.local + "/sign_in")
        page.locator("#passkey-sign-in").wait_for()
        with page.expect_response(lambda response: response.request.method == "POST" and response.url.endswith("/sign_in")) as answered:
            page.click("#passkey-sign-in")
        assert answered.value.status == 422
        page.locator("main .flash[role=alert]", has_text="That passkey could not sign you in").wait_for()
        assert (sign_count(passkey_server, name), sessions(passkey_server)) == before, "no session, the counter as it was"
    finally:
        context.close()


def test_an_account_made_with_a_passkey_instead_of_a_password_signs_in_with_it(passkey_server, browser):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    with_authenticator(context, page)
    try:
        page.goto(passkey_server.local + "/sign_up")
        page.locator("#sign-up-with-passkey").wait_for()
        page.fill("input[name=name]", "Pat Passkey")
        page.fill("input[name=email]", "pat.passkey@example.com")
        page.check("input[name=accept_terms]")
        page.click("#sign-up-with-passkey")
        page.locator("#flash", has_text="Add your passkey below").wait_for()
        page.click("#add-passkey")
        page.locator("#passkey-list .passkey").wait_for()
        sign_out(page, passkey_server)
        # No password signs in to it (an empty one is refused by the form; any other is wrong).
        page.goto(passkey_server.local + "/sign_in")
        page.wait_for_url(passkey_server.local + "/")  # the browser's autofill offers the passkey at once
        page.goto(passkey_server.local + "/account")
        assert page.locator("#account-email").inner_text() == "pat.passkey@example.com"
    finally:
        context.close()
