"""nanoidp at its own root, as it lays itself out: the first generic OpenID Connect provider peer (no Keycloak paths).

Run: python nanoidp_provider.py PORT WORKDIR
Env: OIDC_REDIRECT_URIS   comma-separated redirect URIs of Foyer's client

Issuer http://127.0.0.1:PORT; /authorize, /token, /userinfo, /introspect, /revoke, /logout and
/.well-known/jwks.json at the root. Access tokens are RS256 JWTs carrying `groups`.
Clients: `foyer-web` (confidential, secret `foyer-web-secret`, HTTP Basic; the audience of access tokens) and
`phone-app` (public, PKCE: what an AppAuth app registers, redirect http://127.0.0.1/phone-app/callback).
Users: erin / "erin password" (groups admin, staff), finn / "finn password" (group staff).
"""
import json
import os
import pathlib
import sys
import textwrap


def write_config(workdir: pathlib.Path, port: int) -> pathlib.Path:
    config = workdir / "nanoidp-root"
    config.mkdir(parents=True, exist_ok=True)
    redirect_uris = [uri for uri in os.environ.get("OIDC_REDIRECT_URIS", "").split(",") if uri]
    (config / "settings.yaml").write_text(textwrap.dedent(f"""\
        config_version: 1
        server: {{host: "127.0.0.1", port: {port}}}
        oauth:
          issuer: "http://127.0.0.1:{port}"
          audience: "foyer-web"
          token_expiry_minutes: 5
          clients:
            - client_id: "foyer-web"
              client_secret: "foyer-web-secret"
              redirect_uris: {json.dumps(redirect_uris)}
            - client_id: "phone-app"
              token_endpoint_auth_method: "none"
              redirect_uris: ["http://127.0.0.1/phone-app/callback"]
        jwt:
          keys_dir: "{config / 'keys'}"
        """))
    (config / "users.yaml").write_text(textwrap.dedent("""\
        config_version: 1
        users:
          erin:
            password: "erin password"
            email: "erin@example.com"
            groups: ["admin", "staff"]
          finn:
            password: "finn password"
            email: "finn@example.com"
            groups: ["staff"]
        """))
    return config


def main():
    port, workdir = int(sys.argv[1]), pathlib.Path(sys.argv[2])
    config = write_config(workdir, port)
    from nanoidp.app import create_app
    from werkzeug.serving import run_simple

    run_simple("127.0.0.1", port, create_app(str(config)), threaded=True)


if __name__ == "__main__":
    main()
