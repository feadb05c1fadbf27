"""Schemathesis hooks for test_openapi (loaded through SCHEMATHESIS_HOOKS).

Schemathesis draws `Idempotency-Key` values from a small pool, so two different requests often carry the same key,
which the contract answers with 422 (the key was used for another request) and Schemathesis takes for a valid
request refused. A client makes a new key for each new request: so does this hook, for every key the schema allows
(1 to 255 characters). Keys the schema forbids are sent as generated, and must be refused with 400."""
import io
import pathlib
import uuid

import schemathesis


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and 1 <= len(key) <= 255 and key.strip():
        case.headers["Idempotency-Key"] = str(uuid.uuid4())


# The `picture` part of a post's multipart body declares six media types. Schemathesis serializes a part only for a
# media type it has a strategy for, and picks one of the six at random: without these, drawing `image/heif` ended the
# run with "Serialization not possible" (or not, as the draw fell). Each type draws a real small picture of that kind,
# so the upload path runs, or arbitrary bytes, which must be refused with 422.
def _pictures():
    from hypothesis import strategies as st
    from PIL import Image

    def encoded(kind):
        out = io.BytesIO()
        Image.new("RGB", (16, 12), (200, 40, 40)).save(out, kind)
        return out.getvalue()

    heic = (pathlib.Path(__file__).parent / "fixtures" / "red-corner.heic").read_bytes()
    real = {
        "image/jpeg": encoded("JPEG"), "image/png": encoded("PNG"), "image/webp": encoded("WEBP"),
        "image/heic": heic, "image/heif": heic,
    }
    for media_type, picture in real.items():
        schemathesis.openapi.media_type(media_type, st.just(picture) | st.binary(max_size=64))
    schemathesis.openapi.media_type("application/octet-stream", st.sampled_from(list(real.values())) | st.binary(max_size=64))


_pictures()
