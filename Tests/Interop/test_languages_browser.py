"""Pages in the reader's language, in Chromium with its locale set as a phone's would be (390 px wide): English,
Brazilian Portuguese and Simplified Chinese, chosen by Accept-Language or by the account's own setting; and mail in
its recipient's language, received by a real SMTP server (aiosmtpd), whatever language the request that caused it
came in."""
import json
import os
import pathlib
import urllib.request
import uuid

import pytest
from conftest import DEMO_EMAIL, RunningServer, wait_for_page
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_graphql import session_token
from test_moderation import plain_smtp  # noqa: F401  (a plain SMTP peer, aiosmtpd)
from test_posts_browser import sign_in

SCREENSHOTS = os.environ.get("FOYER_SCREENSHOTS")

# Chromium's locale, the language Foyer answers in, and what its pages say in it.
LANGUAGES = {
    "pt-BR": {
        "tag": "pt-BR", "posts": "Publicações", "all_posts": "Todas as publicações", "sign_in": "Entrar",
        "wrong_password": "E-mail ou senha incorretos.", "sign_up": "Criar conta", "account": "Sua conta",
        "offline": "Você está sem conexão", "blank_title": "Título não pode ficar em branco",
        "welcome_subject": "Boas-vindas ao Foyer: confirme seu e-mail", "reset_subject": "Redefina sua senha do Foyer",
    },
    "zh-CN": {
        "tag": "zh-Hans", "posts": "帖子", "all_posts": "所有帖子", "sign_in": "登录", "wrong_password": "邮箱或密码不正确。",
        "sign_up": "注册", "account": "你的账户", "offline": "你已离线", "blank_title": "标题不能为空",
        "welcome_subject": "欢迎来到 Foyer：请确认你的邮箱", "reset_subject": "重置你的 Foyer 密码",
    },
    "en-US": {
        "tag": "en", "posts": "Posts", "all_posts": "All posts", "sign_in": "Sign in", "wrong_password": "That email or password is incorrect.",
        "sign_up": "Sign up", "account": "Your account", "offline": "You are offline", "blank_title": "Title can't be blank",
        "welcome_subject": "Welcome to Foyer: please confirm your address", "reset_subject": "Reset your Foyer password",
    },
}


@pytest.fixture(scope="module")
def site(tmp_path_factory, plain_smtp):  # noqa: F811
    running = RunningServer(tmp_path_factory.mktemp("foyer-languages"), extra_args=plain_smtp.foyer_args())
    yield running
    running.stop()


def phone(browser, locale: str):  # noqa: F811
    context = browser.new_context(locale=locale, viewport={"width": 390, "height": 844})
    return context, context.new_page()


def screenshot(page, name: str):
    if SCREENSHOTS:
        pathlib.Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=f"{SCREENSHOTS}/{name}.png", full_page=True)


def heading(page) -> str:
    return page.locator("main h1").first.inner_text()


@pytest.mark.parametrize("locale", list(LANGUAGES))
def test_each_page_in_the_browsers_language(site, plain_smtp, browser, locale):  # noqa: F811
    words = LANGUAGES[locale]
    context, page = phone(browser, locale)

    response = page.goto(site.url + "/posts")
    assert response.headers["content-language"] == words["tag"]
    assert page.locator("html").get_attribute("lang") == words["tag"]
    assert heading(page) == words["posts"]
    screenshot(page, f"posts-{words['tag']}-390")
    page.locator("ol.posts li a.row-link").first.click()
    page.locator("main a[href='/posts']", has_text=words["all_posts"]).wait_for()

    page.goto(site.url + "/sign_in")
    wait_for_page(page, "window.Turbo !== undefined")
    assert heading(page) == words["sign_in"]
    page.fill("input[name=email]", DEMO_EMAIL)
    page.fill("input[name=password]", "not the password")
    page.click("main form.stacked button[type=submit]")
    page.locator("main [role=alert]", has_text=words["wrong_password"]).wait_for()
    screenshot(page, f"sign-in-{words['tag']}-390")

    # Sign up in this language: the form's errors are in it, and the account keeps it for its mail.
    address = f"reader.{words['tag'].lower()}.{uuid.uuid4().hex[:6]}@example.com"
    page.goto(site.url + "/sign_up")
    wait_for_page(page, "window.Turbo !== undefined")
    assert heading(page) == words["sign_up"]
    page.fill("#sign-up-name", "Leitora")
    page.fill("#sign-up-email", address)
    page.fill("#sign-up-password", "a lantern by the harbour")
    page.check("#sign-up-accept-terms")
    page.click("main form.stacked button[type=submit]")
    page.wait_for_url(site.url + "/")
    [welcome] = plain_smtp.wait_for(address)
    assert welcome["message"]["Subject"] == words["welcome_subject"]

    page.goto(site.url + "/account")
    assert heading(page) == words["account"]
    assert page.locator("#account-locale option[selected]").get_attribute("value") == words["tag"], "a sign-up keeps its language"

    page.goto(site.url + "/posts/new")
    wait_for_page(page, "window.Turbo !== undefined")
    page.fill("#post-title", " ")
    page.fill("#post-content", "x")
    page.evaluate("document.querySelector('#post-title').removeAttribute('required')")
    page.click("main form button[type=submit]")
    page.locator("#title-error", has_text=words["blank_title"]).wait_for()
    assert words["blank_title"] in page.locator("#error-explanation").inner_text()

    page.goto(site.url + "/offline")
    assert heading(page) == words["offline"]
    context.close()


def test_the_accounts_language_wins_over_the_browsers_until_it_goes_back(site, browser):  # noqa: F811
    context, page = phone(browser, "pt-BR")
    sign_in(page, site)

    page.goto(site.url + "/account")
    assert heading(page) == "Sua conta"
    page.select_option("#account-locale", "zh-Hans")
    page.click("#language-form button[type=submit]")
    page.locator("#flash", has_text="你的语言设置已保存。").wait_for()
    assert heading(page) == "你的账户"
    page.goto(site.url + "/posts")
    assert heading(page) == "帖子", "the account's language, though the browser asks for Portuguese"
    assert page.locator("html").get_attribute("lang") == "zh-Hans"

    page.goto(site.url + "/account")
    page.select_option("#account-locale", "")
    page.click("#language-form button[type=submit]")
    page.locator("#flash", has_text="Seu idioma foi salvo.").wait_for()
    assert heading(page) == "Sua conta"
    context.close()


def test_mail_goes_out_in_its_recipients_language_not_the_requests(site, plain_smtp):  # noqa: F811
    """An account made in Chinese asks for a password reset from a Portuguese browser: the mail is in Chinese."""
    address = f"wang.{uuid.uuid4().hex[:6]}@example.com"
    request = urllib.request.Request(
        site.url + "/api/v1/users", method="POST",
        headers={"Content-Type": "application/json", "Accept-Language": "zh-CN,zh;q=0.9"},
        data=json.dumps({"name": "王芳", "email": address, "password": "a lantern by the harbour", "accept_terms": True}).encode(),
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
    [welcome] = plain_smtp.wait_for(address)
    assert welcome["message"]["Subject"] == LANGUAGES["zh-CN"]["welcome_subject"]
    assert "王芳，你好：" in welcome["message"].get_body(preferencelist=("plain",)).get_content()

    reset = urllib.request.Request(
        site.url + "/api/v1/password_resets", method="POST",
        headers={"Content-Type": "application/json", "Accept-Language": "pt-BR", "Accept": "application/json"},
        data=json.dumps({"email": address}).encode(),
    )
    with urllib.request.urlopen(reset, timeout=10) as response:
        assert response.status == 202
        assert json.load(response)["message"].startswith("Se houver uma conta"), "the answer is in the asker's language"
    mails = plain_smtp.wait_for(address, count=2)
    assert mails[1]["message"]["Subject"] == LANGUAGES["zh-CN"]["reset_subject"], "the mail is in the recipient's"
    html = mails[1]["message"].get_body(preferencelist=("html",)).get_content()
    assert '<html lang="zh-Hans">' in html


def test_open_pages_are_sent_a_new_post_in_their_own_language(site, browser):  # noqa: F811
    """Three phones in three languages have the list open; a post written through the API reaches each live, its
    row saying the time in that phone's language (each follows its own language's stream)."""
    phones = {locale: phone(browser, locale) for locale in ("pt-BR", "zh-CN", "en-US")}
    streams = {}
    for locale, (_, page) in phones.items():
        page.goto(site.url + "/posts")
        wait_for_page(page, "window.Turbo !== undefined")
        streams[locale] = page.locator("turbo-stream-source").first.get_attribute("src")
        page.locator("turbo-stream-source[connected]").first.wait_for(state="attached")
    assert len(set(streams.values())) == 3, streams

    title = f"Said three ways {uuid.uuid4().hex[:6]}"
    token = session_token(site)
    request = urllib.request.Request(
        site.url + "/api/v1/posts", method="POST", headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        data=json.dumps({"title": title, "content": "words"}).encode(),
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
    for locale, just_now in (("pt-BR", "agora mesmo"), ("zh-CN", "刚刚"), ("en-US", "just now")):
        context, page = phones[locale]
        row = page.locator("ol.posts li", has_text=title)
        row.wait_for()
        assert row.locator("time").inner_text() == just_now, locale
        context.close()
