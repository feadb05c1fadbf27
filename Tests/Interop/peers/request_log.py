"""ASGI middleware for the GraphQL peers: what tests need to count upstream calls.

GET /_peer/requests answers the `query` text of every GraphQL request received over HTTP so far, in order (a batch
adds each member's), so a test counts the calls its own documents caused whatever else ran. A request whose
`operationName` starts with `Slow` is held for half a second before the server sees it, so that requests sent
together are surely in flight together."""
import asyncio
import json


class RequestLog:
    def __init__(self, app):
        self.app = app
        self.queries: list[str | None] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == "/_peer/requests":
            body = json.dumps(self.queries).encode()
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            parsed = json.loads(body)
            operations = parsed if isinstance(parsed, list) else [parsed]
        except ValueError:
            operations = [{}]
        self.queries.extend(operation.get("query") if isinstance(operation, dict) else None for operation in operations)
        if any(isinstance(o, dict) and (o.get("operationName") or "").startswith("Slow") for o in operations):
            await asyncio.sleep(0.5)
        delivered = False

        async def replay():
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)
