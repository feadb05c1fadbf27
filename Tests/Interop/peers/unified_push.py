"""A Unified Push Server peer: the registry and sender endpoints as UPS documents them, nothing else.

- POST   /rest/registry/device          HTTP Basic variantID:secret; an Installation JSON body; `x-ag-old-token`
                                        drops that token first. 200 with the installation; 400 for a token that does
                                        not suit the variant's platform (UPS's DeviceTokenValidator); 401 otherwise.
- DELETE /rest/registry/device/{token}  HTTP Basic variantID:secret; 204, or 404 for a token it does not hold.
- POST   /rest/sender                   HTTP Basic pushApplicationID:masterSecret; a message JSON; 202 `{}`.

Everything received is recorded, so tests can see what Foyer sent. Runs in a thread of the test process (`start`,
`stop`, `start` again on the same port), or alone: `python unified_push.py PORT`.
"""
import base64
import json
import re
import socket
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_PATTERNS = {
    "ios": re.compile(r"(?i)[a-f0-9 -]{64,}"),
    "android": re.compile(r"(?i)[0-9a-z\-_:]{100,}"),
}


class UnifiedPushPeer:
    def __init__(self, port: int, variants: dict, application: tuple[str, str]):
        """variants: {variant_id: (secret, "ios" | "android")}; application: (push application id, master secret)."""
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.variants = variants
        self.application = application
        self.lock = threading.Lock()
        self.installations = {}  # (variant id, token) -> installation dict
        self.messages = []  # sender bodies, as received
        self.requests = []  # (method, path, basic user, headers) of every request
        self.connections = set()  # open sockets: stopping closes kept-alive connections too
        self.httpd = None

    # --- what tests look at ---

    def installation(self, token: str):
        with self.lock:
            return next((value | {"variantID": key[0]} for key, value in self.installations.items() if key[1] == token), None)

    def aliases(self) -> dict:
        with self.lock:
            grouped = {}
            for (variant, token), value in self.installations.items():
                grouped.setdefault(value.get("alias"), []).append(token)
            return grouped

    def sent(self) -> list:
        with self.lock:
            return list(self.messages)

    # --- running ---

    def start(self):
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                with peer.lock:
                    peer.connections.add(self.connection)

            def finish(self):
                with peer.lock:
                    peer.connections.discard(self.connection)
                super().finish()

            def basic(self):
                header = self.headers.get("Authorization", "")
                if not header.startswith("Basic "):
                    return None, None
                try:
                    user, _, secret = base64.b64decode(header[6:]).decode().partition(":")
                except ValueError:
                    return None, None
                return user, secret

            def body(self):
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def answer(self, status: int, body: bytes = b"", extra=()):
                self.send_response(status)
                for name, value in extra:
                    self.send_header(name, value)
                if body:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def unauthorized(self):
                self.answer(401, b'{"error":"Unauthorized Request"}', [("WWW-Authenticate", 'Basic realm="AeroGear UnifiedPush Server"')])

            def variant(self):
                user, secret = self.basic()
                known = peer.variants.get(user)
                if not known or known[0] != secret:
                    return None, None
                return user, known[1]

            def record(self, user):
                with peer.lock:
                    peer.requests.append((self.command, self.path, user, dict(self.headers)))

            def do_POST(self):
                path = urllib.parse.urlsplit(self.path).path
                raw = self.body()
                if path == "/rest/registry/device":
                    variant, platform = self.variant()
                    self.record(variant)
                    if not variant:
                        return self.unauthorized()
                    try:
                        installation = json.loads(raw)
                    except ValueError:
                        return self.answer(400)
                    token = installation.get("deviceToken")
                    if not isinstance(token, str) or not TOKEN_PATTERNS[platform].fullmatch(token):
                        return self.answer(400)
                    old = self.headers.get("x-ag-old-token", "")
                    with peer.lock:
                        if old and old != token:
                            peer.installations.pop((variant, old), None)
                        peer.installations[(variant, token)] = installation | {"oldToken": old or None}
                    return self.answer(200, json.dumps(installation).encode())
                if path == "/rest/sender":
                    user, secret = self.basic()
                    self.record(user)
                    if (user, secret) != peer.application:
                        return self.unauthorized()
                    try:
                        message = json.loads(raw)
                    except ValueError:
                        return self.answer(400)
                    with peer.lock:
                        peer.messages.append(message)
                    return self.answer(202, b"{}")
                self.answer(404)

            def do_DELETE(self):
                path = urllib.parse.urlsplit(self.path).path
                prefix = "/rest/registry/device/"
                if not path.startswith(prefix):
                    return self.answer(404)
                variant, _ = self.variant()
                self.record(variant)
                if not variant:
                    return self.unauthorized()
                token = urllib.parse.unquote(path[len(prefix):])
                with peer.lock:
                    found = peer.installations.pop((variant, token), None)
                self.answer(204 if found else 404)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        """As if the server went away: no new connections, and the kept-alive ones are cut."""
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None
        with self.lock:
            connections, self.connections = list(self.connections), set()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


if __name__ == "__main__":
    peer = UnifiedPushPeer(int(sys.argv[1]), {"ios-variant": ("ios-secret", "ios"), "android-variant": ("android-secret", "android")},
                           ("push-app", "master-secret"))
    peer.start()
    print(f"Unified Push peer on {peer.url}", flush=True)
    threading.Event().wait()
