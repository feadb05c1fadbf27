"""Schemathesis hooks for test_openapi (loaded through SCHEMATHESIS_HOOKS).

Schemathesis draws `Idempotency-Key` values from a small pool, so two different requests often carry the same key,
which the contract answers with 422 (the key was used for another request) and Schemathesis takes for a valid
request refused. A client makes a new key for each new request: so does this hook, for every key the schema allows
(1 to 255 characters). Keys the schema forbids are sent as generated, and must be refused with 400."""
import uuid

import schemathesis


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and 1 <= len(key) <= 255 and key.strip():
        case.headers["Idempotency-Key"] = str(uuid.uuid4())
