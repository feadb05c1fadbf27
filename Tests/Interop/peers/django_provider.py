"""django-oidc-provider (a real OpenID Connect provider, a Django app) as the second generic provider peer.

Run: python django_provider.py PORT WORKDIR
Env: OIDC_REDIRECT_URIS   comma-separated redirect URIs of Foyer's client

Laid out as the Django app lays itself out: discovery at /openid/.well-known/openid-configuration, issuer
http://127.0.0.1:PORT/openid; the login page at /accounts/login/. Access tokens are opaque (32 hex digits);
Foyer checks them by introspection, which its client is allowed (scope token_introspection). RS256 keys are made
by the app's own `creatersakey`. No password grant is advertised (and none is enabled).
Clients: `foyer-web` (confidential, secret `foyer-web-secret`, HTTP Basic) and `phone-app` (public, PKCE).
Users: carol / "carol password" (carol@example.net), dan / "dan password" (dan@example.net).
"""
import os
import pathlib
import sys

PORT, WORKDIR = int(sys.argv[1]), pathlib.Path(sys.argv[2])
WORKDIR.mkdir(parents=True, exist_ok=True)
SITE_URL = f"http://127.0.0.1:{PORT}"
LOGIN_PAGE = """<!doctype html><title>Sign in</title>
<form method="post">{% csrf_token %}
<input type="hidden" name="next" value="{{ next }}">
<label>Username <input id="username" name="username"></label>
<label>Password <input id="password" name="password" type="password"></label>
<button type="submit">Sign in</button></form>"""


def userinfo(claims, user):
    claims["email"] = user.email
    claims["email_verified"] = True
    claims["preferred_username"] = user.username
    claims["name"] = user.get_full_name() or user.username
    return claims


def configure():
    from django.conf import settings
    (WORKDIR / "templates" / "registration").mkdir(parents=True, exist_ok=True)
    (WORKDIR / "templates" / "registration" / "login.html").write_text(LOGIN_PAGE)
    settings.configure(
        DEBUG=False,
        SECRET_KEY="django-provider-peer-not-a-secret",
        ALLOWED_HOSTS=["127.0.0.1", "localhost"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions", "oidc_provider"],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
        ],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(WORKDIR / "provider.sqlite3")}},
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [str(WORKDIR / "templates")],
                    "APP_DIRS": True, "OPTIONS": {"context_processors": ["django.template.context_processors.request"]}}],
        LOGIN_URL="/accounts/login/",
        SITE_URL=SITE_URL,
        USE_TZ=True,
        OIDC_USERINFO=f"{__name__}.userinfo",
        OIDC_IDTOKEN_INCLUDE_CLAIMS=True,
        OIDC_INTROSPECTION_VALIDATE_AUDIENCE_SCOPE=False,
        OIDC_TOKEN_EXPIRE=3600,
    )
    import django
    django.setup()


urlpatterns = []


def routes():
    from django.contrib.auth import views as auth_views
    from django.urls import include, path
    urlpatterns.extend([
        path("accounts/login/", auth_views.LoginView.as_view()),
        path("openid/", include("oidc_provider.urls", namespace="oidc_provider")),
    ])


def seed():
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from oidc_provider.models import Client, ResponseType, RSAKey
    call_command("migrate", verbosity=0)
    if not RSAKey.objects.exists():
        call_command("creatersakey")
    for name, email in [("carol", "carol@example.net"), ("dan", "dan@example.net")]:
        if not User.objects.filter(username=name).exists():
            User.objects.create_user(name, email=email, password=f"{name} password")
    code = ResponseType.objects.get(value="code")
    redirect_uris = [uri for uri in os.environ.get("OIDC_REDIRECT_URIS", "").split(",") if uri]
    for client_id, kind, secret, uris, scope in [
        ("foyer-web", "confidential", "foyer-web-secret", redirect_uris, ["openid", "profile", "email", "token_introspection"]),
        ("phone-app", "public", "", ["http://127.0.0.1/phone-app/callback"], ["openid", "profile", "email"]),
    ]:
        client, _ = Client.objects.get_or_create(client_id=client_id, defaults={"name": client_id})
        client.client_type, client.client_secret, client.jwt_alg = kind, secret, "RS256"
        client.redirect_uris, client.scope = uris, scope
        client.post_logout_redirect_uris = [uri.split("/sign_in/")[0] + "/" for uri in uris]
        client.require_consent = False
        client.save()
        client.response_types.set([code])


def main():
    configure()
    routes()
    seed()
    from django.core.management import call_command
    call_command("runserver", f"127.0.0.1:{PORT}", use_reloader=False, use_threading=True, skip_checks=True)


if __name__ == "__main__":
    main()
