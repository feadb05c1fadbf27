"""nanoidp (a real OIDC provider) behind Keycloak's URL layout: the OIDC peer Foyer's Keycloak tests run against.

Run: python keycloak_adapter.py PORT WORKDIR
Env: OIDC_REALM              realm name (default showcase)
     OIDC_CLIENT_ID          confidential client Foyer uses (default foyer)
     OIDC_CLIENT_SECRET      its secret (default foyer-secret), HTTP Basic at the token endpoint
     OIDC_REDIRECT_URIS      comma-separated redirect URIs allowed for it
     OIDC_EXPIRES_IN         when set, the `expires_in` token responses announce (seconds): a short lifetime
                             without waiting out nanoidp's one-minute minimum

What the adapter adds to nanoidp, each a Keycloak behaviour Foyer relies on:
- `/realms/{realm}/protocol/openid-connect/{auth,token,userinfo,certs,logout,revoke,token/introspect}` and
  `/realms/{realm}/.well-known/openid-configuration` naming those paths;
- a wrong password on the password grant is `401 invalid_grant` (nanoidp says 400);
- back-channel logout: `POST …/logout` with `refresh_token` and client credentials revokes it and answers 204
  (nanoidp's /logout is the browser end-session page).
- behind a reverse proxy (Foyer's `/realms/…`), the issuer in discovery and in the tokens minted there follows
  `X-Forwarded-Host/Proto/Port`, as Keycloak's `--proxy-headers xforwarded` does, so an app sees one issuer.
Clients: `foyer` (confidential, HTTP Basic) and `showcase-app` (public, PKCE: what an AppAuth app registers).
Users: ada / "ada password" (realm roles user, admin), bob / "bob password" (user).
"""
import io
import json
import os
import pathlib
import sys
import textwrap
import urllib.parse

REALM = os.environ.get("OIDC_REALM", "showcase")
CLIENT_ID = os.environ.get("OIDC_CLIENT_ID", "foyer")
CLIENT_SECRET = os.environ.get("OIDC_CLIENT_SECRET", "foyer-secret")
APP_CLIENT_ID = "showcase-app"
APP_REDIRECT_URI = "http://127.0.0.1/showcase-app/callback"
KEYCLOAK_ENDPOINTS = {
    "auth": "/authorize",
    "token": "/token",
    "userinfo": "/userinfo",
    "certs": "/.well-known/jwks.json",
    "revoke": "/revoke",
    "token/introspect": "/introspect",
    "logout": "/logout",
}


def write_config(workdir: pathlib.Path, port: int) -> pathlib.Path:
    config = workdir / "nanoidp"
    config.mkdir(parents=True, exist_ok=True)
    redirect_uris = [uri for uri in os.environ.get("OIDC_REDIRECT_URIS", "").split(",") if uri]
    (config / "settings.yaml").write_text(textwrap.dedent(f"""\
        config_version: 1
        server: {{host: "127.0.0.1", port: {port}}}
        oauth:
          issuer: "http://127.0.0.1:{port}/realms/{REALM}"
          audience: "{CLIENT_ID}"
          token_expiry_minutes: 1
          refresh_token_rotation: true
          clients:
            - client_id: "{CLIENT_ID}"
              client_secret: "{CLIENT_SECRET}"
              redirect_uris: {json.dumps(redirect_uris)}
            - client_id: "{APP_CLIENT_ID}"
              token_endpoint_auth_method: "none"
              redirect_uris: ["{APP_REDIRECT_URI}"]
        jwt:
          keys_dir: "{config / 'keys'}"
        """))
    (config / "users.yaml").write_text(textwrap.dedent("""\
        config_version: 1
        users:
          ada:
            password: "ada password"
            email: "ada@example.org"
            roles: ["user", "admin"]
          bob:
            password: "bob password"
            email: "bob@example.org"
            roles: ["user"]
        """))
    return config


class KeycloakLayout:
    """WSGI middleware: Keycloak's paths in, nanoidp's out, and the Keycloak behaviours nanoidp lacks."""

    def __init__(self, app):
        self.app = app
        self.prefix = f"/realms/{REALM}"

    def __call__(self, environ, start_response):
        if os.environ.get("PEER_TRACE_LOG"):  # so tests can check that Foyer's calls can be followed
            entry = {"path": environ.get("PATH_INFO", ""), "x-request-id": environ.get("HTTP_X_REQUEST_ID"),
                     "traceparent": environ.get("HTTP_TRACEPARENT")}
            if entry["path"].endswith("/token") and environ.get("REQUEST_METHOD") == "POST":
                entry["grant_type"] = urllib.parse.parse_qs(self.peek_body(environ).decode()).get("grant_type", [None])[0]
            with open(os.environ["PEER_TRACE_LOG"], "a") as log:
                log.write(json.dumps(entry) + "\n")
        environ["keycloak.issuer"] = self.issuer(environ)
        path = environ.get("PATH_INFO", "")
        if path.startswith("/auth/realms/"):  # old Keycloak's base URL ends in /auth
            path = path[len("/auth"):]
        if path == self.prefix + "/.well-known/openid-configuration":
            return self.discovery(environ, start_response)
        endpoint = path[len(self.prefix + "/protocol/openid-connect/"):] if path.startswith(self.prefix + "/protocol/openid-connect/") else None
        if endpoint == "logout" and environ["REQUEST_METHOD"] == "POST" and b"refresh_token=" in self.peek_body(environ):
            return self.back_channel_logout(environ, start_response)
        if endpoint in KEYCLOAK_ENDPOINTS:
            environ["PATH_INFO"] = KEYCLOAK_ENDPOINTS[endpoint]
        elif path.startswith(self.prefix + "/"):
            environ["PATH_INFO"] = path[len(self.prefix):]
        if endpoint == "token":
            return self.token(environ, start_response)
        return self.app(environ, start_response)

    def issuer(self, environ) -> str:
        """Keycloak builds its URLs from the request: through a proxy, from its X-Forwarded-* headers."""
        proto = environ.get("HTTP_X_FORWARDED_PROTO", environ["wsgi.url_scheme"]).split(",")[0].strip()
        host = environ.get("HTTP_X_FORWARDED_HOST", "").split(",")[0].strip() or environ["HTTP_HOST"]
        port = environ.get("HTTP_X_FORWARDED_PORT", "").split(",")[0].strip()
        if port and ":" not in host and port != {"http": "80", "https": "443"}.get(proto):
            host += ":" + port
        return f"{proto}://{host}{self.prefix}"

    def peek_body(self, environ) -> bytes:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(body)
        return body

    def call(self, environ):
        captured = {}

        def capture(status, headers, exc_info=None):
            captured["status"], captured["headers"] = status, headers

        body = b"".join(self.app(environ, capture))
        return captured["status"], captured["headers"], body

    def discovery(self, environ, start_response):
        environ["PATH_INFO"] = "/.well-known/openid-configuration"
        status, headers, body = self.call(environ)
        document = json.loads(body)
        issuer = environ["keycloak.issuer"]
        base = issuer + "/protocol/openid-connect/"
        document.update({
            "issuer": issuer,
            "authorization_endpoint": base + "auth",
            "token_endpoint": base + "token",
            "userinfo_endpoint": base + "userinfo",
            "jwks_uri": base + "certs",
            "end_session_endpoint": base + "logout",
            "revocation_endpoint": base + "revoke",
            "introspection_endpoint": base + "token/introspect",
        })
        payload = json.dumps(document).encode()
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
        return [payload]

    def token(self, environ, start_response):
        form = self.peek_body(environ)
        status, headers, body = self.call(environ)
        if status.startswith("400") and b"grant_type=password" in form and b'"invalid_grant"' in body:
            status = "401 Unauthorized"
        expires_in = os.environ.get("OIDC_EXPIRES_IN")
        if expires_in and status.startswith("200"):
            document = json.loads(body)
            document["expires_in"] = int(expires_in)
            body = json.dumps(document).encode()
        headers = [(name, value) for name, value in headers if name.lower() != "content-length"]
        start_response(status, headers + [("Content-Length", str(len(body)))])
        return [body]

    def back_channel_logout(self, environ, start_response):
        """Keycloak's `POST logout` with a refresh token: that session ends; 204."""
        from urllib.parse import parse_qs, urlencode
        form = parse_qs(self.peek_body(environ).decode())
        revoke = {"token": form["refresh_token"][0], "token_type_hint": "refresh_token"}
        if "client_id" in form:  # a public client names itself in the form; a confidential one in Basic
            revoke["client_id"] = form["client_id"][0]
        revoke_body = urlencode(revoke).encode()
        environ.update({
            "PATH_INFO": "/revoke", "CONTENT_LENGTH": str(len(revoke_body)), "wsgi.input": io.BytesIO(revoke_body),
            "CONTENT_TYPE": "application/x-www-form-urlencoded",
        })
        status, headers, body = self.call(environ)
        if not status.startswith("200"):
            start_response(status, headers)
            return [body]
        start_response("204 No Content", [])
        return [b""]


def main():
    port, workdir = int(sys.argv[1]), pathlib.Path(sys.argv[2])
    config = write_config(workdir, port)
    from nanoidp.app import create_app
    from werkzeug.serving import run_simple

    follow_the_request_issuer()
    app = create_app(str(config))
    run_simple("127.0.0.1", port, KeycloakLayout(app), threaded=True)


def follow_the_request_issuer():
    """nanoidp mints `iss` from one fixed setting (or from the bare host, without the realm path): have every route
    use the issuer the adapter worked out for this request instead."""
    import flask
    from nanoidp.routes import _issuer, api, oauth, registration

    fixed = _issuer.effective_issuer

    def effective_issuer(settings):
        return flask.request.environ.get("keycloak.issuer") or fixed(settings)

    for module in (_issuer, api, oauth, registration):
        module.effective_issuer = effective_issuer


if __name__ == "__main__":
    main()
