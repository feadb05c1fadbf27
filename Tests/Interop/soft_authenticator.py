"""A software authenticator made of the `fido2` package's COSE keys and CBOR: it answers Foyer's passkey options as
a phone's platform authenticator would, in the JSON the browser's PublicKeyCredential.toJSON() gives, and can be
told to lie (another origin, another RP ID, no user verification, a counter that goes back) to see Foyer refuse."""
import base64
import hashlib
import json
import os
import struct

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from fido2 import cbor
from fido2.cose import ES256, RS256, EdDSA


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SoftAuthenticator:
    UP, UV, BE, BS, AT = 0x01, 0x04, 0x08, 0x10, 0x40

    def __init__(self, algorithm: str = "ES256", origin: str = "", rp_id: str | None = None, credential_id: bytes | None = None):
        self.algorithm, self.origin, self.rp_id = algorithm, origin, rp_id
        if algorithm == "ES256":
            self.key = ec.generate_private_key(ec.SECP256R1())
            self.cose = ES256.from_cryptography_key(self.key.public_key())
        elif algorithm == "EdDSA":
            self.key = ed25519.Ed25519PrivateKey.generate()
            self.cose = EdDSA.from_cryptography_key(self.key.public_key())
        else:
            self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.cose = RS256.from_cryptography_key(self.key.public_key())
        self.credential_id = credential_id or os.urandom(32)
        self.user_handle = None
        self.counter = 0

    def sign(self, data: bytes) -> bytes:
        if self.algorithm == "ES256":
            return self.key.sign(data, ec.ECDSA(hashes.SHA256()))
        if self.algorithm == "EdDSA":
            return self.key.sign(data)
        return self.key.sign(data, padding.PKCS1v15(), hashes.SHA256())

    def client_data(self, kind: str, challenge: str, origin: str | None = None) -> bytes:
        return json.dumps({"type": kind, "challenge": challenge, "origin": origin or self.origin, "crossOrigin": False,
                           "other_keys_can_be_added_here": "do not compare clientDataJSON against a template"}).encode()

    def authenticator_data(self, rp_id: str, flags: int, counter: int, attested: bytes = b"") -> bytes:
        return hashlib.sha256(rp_id.encode()).digest() + bytes([flags]) + struct.pack(">I", counter) + attested

    def register(self, options: dict, *, origin: str | None = None, flags: int = UP | UV | BE | BS) -> dict:
        """A new credential for `options` (PublicKeyCredentialCreationOptionsJSON)."""
        rp_id = self.rp_id or options["rp"]["id"]
        self.user_handle = options["user"]["id"]
        attested = bytes(16) + struct.pack(">H", len(self.credential_id)) + self.credential_id + cbor.encode(dict(self.cose))
        auth_data = self.authenticator_data(rp_id, flags | self.AT, self.counter, attested)
        attestation = cbor.encode({"fmt": "none", "attStmt": {}, "authData": auth_data})
        client = self.client_data("webauthn.create", options["challenge"], origin)
        return {
            "id": b64url(self.credential_id), "rawId": b64url(self.credential_id), "type": "public-key",
            "response": {"clientDataJSON": b64url(client), "attestationObject": b64url(attestation), "transports": ["internal"]},
            "authenticatorAttachment": "platform", "clientExtensionResults": {},
        }

    def get(self, options: dict, *, origin: str | None = None, rp_id: str | None = None, flags: int = UP | UV | BE | BS,
            counter: int | None = None) -> dict:
        """An assertion for `options` (PublicKeyCredentialRequestOptionsJSON); the counter rises unless given."""
        self.counter = self.counter + 1 if counter is None else counter
        auth_data = self.authenticator_data(rp_id or self.rp_id or options["rpId"], flags, self.counter)
        client = self.client_data("webauthn.get", options["challenge"], origin)
        signature = self.sign(auth_data + hashlib.sha256(client).digest())
        return {
            "id": b64url(self.credential_id), "rawId": b64url(self.credential_id), "type": "public-key",
            "response": {"clientDataJSON": b64url(client), "authenticatorData": b64url(auth_data), "signature": b64url(signature),
                         "userHandle": self.user_handle},
            "authenticatorAttachment": "platform", "clientExtensionResults": {},
        }
