"""A DPoP client written from RFC 9449 (and RFC 7638 for thumbprints), as a native app holds it: a private key
that never leaves the device, a proof per request signed with it. PyJWT signs; `cryptography` makes the keys."""
import base64
import hashlib
import json
import secrets
import time

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class DeviceKey:
    """ES256 on P-256 (what the Secure Enclave and Android's Keystore hold), or RS256 for an app that uses RSA."""

    def __init__(self, algorithm: str = "ES256"):
        self.algorithm = algorithm
        if algorithm == "ES256":
            self.private = ec.generate_private_key(ec.SECP256R1())
            numbers = self.private.public_key().public_numbers()
            self.jwk = {"kty": "EC", "crv": "P-256", "x": b64url(numbers.x.to_bytes(32, "big")),
                        "y": b64url(numbers.y.to_bytes(32, "big"))}
        else:
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            numbers = self.private.public_key().public_numbers()
            self.jwk = {"kty": "RSA", "e": b64url(numbers.e.to_bytes(3, "big")),
                        "n": b64url(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big"))}

    @property
    def thumbprint(self) -> str:
        """RFC 7638: the required members only, sorted, no whitespace, SHA-256, base64url."""
        required = {"EC": ["crv", "kty", "x", "y"], "RSA": ["e", "kty", "n"]}[self.jwk["kty"]]
        canonical = json.dumps({name: self.jwk[name] for name in required}, separators=(",", ":"), sort_keys=True)
        return b64url(hashlib.sha256(canonical.encode()).digest())

    def proof(self, method: str, url: str, token: str | None = None, *, iat: int | None = None, jti: str | None = None,
              header: dict | None = None, claims: dict | None = None) -> str:
        """RFC 9449 §4.2: `typ`, `alg`, the public `jwk`; `jti`, `htm`, `htu` (no query or fragment), `iat`, and
        `ath` (the token's SHA-256) when a token goes with it. `header`/`claims` override, to make bad proofs."""
        body = {"jti": jti or secrets.token_urlsafe(16), "htm": method, "htu": url.split("?")[0].split("#")[0],
                "iat": int(time.time()) if iat is None else iat}
        if token is not None:
            body["ath"] = b64url(hashlib.sha256(token.encode()).digest())
        body.update(claims or {})
        fields = {"typ": "dpop+jwt", "jwk": self.jwk, **(header or {})}
        return jwt.encode(body, self.private, algorithm=self.algorithm, headers=fields)

    def headers(self, method: str, url: str, token: str) -> dict:
        """What a bound request carries: the token in the DPoP scheme, and a fresh proof for it."""
        return {"Authorization": f"DPoP {token}", "DPoP": self.proof(method, url, token), "Accept": "application/json"}
