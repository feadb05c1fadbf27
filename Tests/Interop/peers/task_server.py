"""The AeroGear DataSync showcase task server, in ariadne: the real GraphQL upstream Foyer's tests proxy to.

Run: python task_server.py PORT
Subscriptions (taskAdded, taskUpdated, taskDeleted) over websockets at the same URL, in whichever protocol the
client offers: legacy `graphql-ws` (what the showcase server speaks) or `graphql-transport-ws`.

Env: TASK_SERVER_TOKEN     when set, requests must carry `Authorization: Bearer <it>` (websockets: in the
                           connection_init payload)
     TASK_SERVER_JWKS_URL  when set instead, the bearer must be an RS256 JWT signed by a key of that JWKS, with
                           issuer TASK_SERVER_ISSUER (comma-separated: one per way into the realm), not expired: Keycloak's tokens, relayed by Foyer
     TASK_SERVER_ON_DENIED `forbidden` (default: 403 "Access denied", as keycloak-connect answers) or
                           `redirect` (302 to a Keycloak login page, as the other keycloak-connect setting does)
     PEER_TRACE_LOG        when set, a file to which every request's X-Request-Id and traceparent are appended,
                           one JSON object per line (tests check that Foyer's calls can be followed)
"""
import asyncio
import json
import os
import sys

import uvicorn
from ariadne import MutationType, QueryType, SubscriptionType, make_executable_schema
from ariadne.asgi import GraphQL
from ariadne.asgi.handlers import GraphQLTransportWSHandler, GraphQLWSHandler
from ariadne.exceptions import WebSocketConnectionError
from graphql import GraphQLError
from request_log import RequestLog

TYPE_DEFS = """
type Task { id: ID!  version: Int  title: String!  description: String!  status: TaskStatus }
enum TaskStatus { OPEN ASSIGNED COMPLETE }
type Query { allTasks(first: Int, after: String): [Task]  getTask(id: ID!): Task }
type Mutation {
  createTask(title: String!, description: String!, status: TaskStatus): Task
  updateTask(id: ID!, title: String, description: String, version: Int!, status: TaskStatus): Task
  deleteTask(id: ID!): ID
}
type Subscription { taskAdded: Task  taskDeleted: Task  taskUpdated: Task }
"""

tasks: dict[str, dict] = {}
last_id = 0
query, mutation, subscription = QueryType(), MutationType(), SubscriptionType()
subscribers: dict[str, set[asyncio.Queue]] = {"taskAdded": set(), "taskUpdated": set(), "taskDeleted": set()}


def publish(event: str, task: dict):
    for queue in subscribers[event]:
        queue.put_nowait(dict(task))


def make_source(event: str):
    async def source(*_):
        queue: asyncio.Queue = asyncio.Queue()
        subscribers[event].add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            subscribers[event].discard(queue)
    return source


for event_name in subscribers:
    subscription.set_source(event_name, make_source(event_name))
    subscription.set_field(event_name, lambda task, *_: task)


@query.field("allTasks")
def all_tasks(_, info, first=None, after=None):
    ordered = sorted(tasks.values(), key=lambda task: int(task["id"]))
    offset = int(after) if after else 0
    return ordered[offset:] if first is None else ordered[offset:offset + first]


@query.field("getTask")
def get_task(_, info, id):
    return tasks.get(id)


@mutation.field("createTask")
def create_task(_, info, title, description, status="OPEN"):
    global last_id
    last_id += 1
    task = {"id": str(last_id), "version": 1, "title": title, "description": description, "status": status or "OPEN"}
    tasks[task["id"]] = task
    publish("taskAdded", task)
    return task


@mutation.field("updateTask")
def update_task(_, info, id, version, **changes):
    task = tasks.get(id)
    if task is None:
        return None
    if task["version"] != version:
        client_state = {"id": id, "version": version, **changes}
        raise GraphQLError("OffixConflict", extensions={"exception": {"conflictInfo": {"serverState": dict(task), "clientState": client_state}}})
    task.update({key: value for key, value in changes.items() if value is not None})
    task["version"] += 1
    publish("taskUpdated", task)
    return task


@mutation.field("deleteTask")
def delete_task(_, info, id):
    task = tasks.pop(id, None)
    if task is None:
        return None
    publish("taskDeleted", task)
    return id


schema = make_executable_schema(TYPE_DEFS, query, mutation, subscription)
# ariadne 1.1.1 patches every enum's parse_value (an instance attribute taking one argument) to repair enum
# defaults; graphql-core 3.2.14 calls it with two, so enum *variables* fail ("takes 1 positional argument but
# 2 were given"). TaskStatus has no defaults to repair: drop the patch and let the class's own method apply.
vars(schema.type_map["TaskStatus"]).pop("parse_value", None)


def check_connection_token(_websocket, payload):
    if not bearer_accepted((payload or {}).get("Authorization", "")):
        raise WebSocketConnectionError({"message": "Access denied"})


# ariadne takes one websocket handler per app: one app per protocol, picked by what the client offers.
legacy_app = GraphQL(schema, websocket_handler=GraphQLWSHandler(on_connect=check_connection_token, keepalive=10))
transport_ws_app = GraphQL(schema, websocket_handler=GraphQLTransportWSHandler(on_connect=check_connection_token))


def graphql_app(scope, receive, send):
    offered = scope.get("subprotocols", []) if scope["type"] == "websocket" else []
    chosen = transport_ws_app if "graphql-transport-ws" in offered else legacy_app
    return chosen(scope, receive, send)


def bearer_accepted(authorization: str) -> bool:
    """What keycloak-connect checks: the configured token, or a realm-signed, unexpired JWT of the right issuer."""
    token = os.environ.get("TASK_SERVER_TOKEN")
    if token:
        return authorization == f"Bearer {token}"
    jwks_url = os.environ.get("TASK_SERVER_JWKS_URL")
    if jwks_url:
        if not authorization.startswith("Bearer "):
            return False
        import jwt
        try:
            jwt_token = authorization[len("Bearer "):]
            key = jwks_client(jwks_url).get_signing_key_from_jwt(jwt_token)
            jwt.decode(jwt_token, key.key, algorithms=["RS256"], issuer=os.environ["TASK_SERVER_ISSUER"].split(","), options={"verify_aud": False})
            return True
        except jwt.PyJWTError:
            return False
    return True


_jwks_clients = {}


def jwks_client(url: str):
    import jwt
    if url not in _jwks_clients:
        _jwks_clients[url] = jwt.PyJWKClient(url)
    return _jwks_clients[url]


def record_trace(scope):
    path = os.environ.get("PEER_TRACE_LOG")
    if not path or scope["type"] not in ("http", "websocket"):
        return
    headers = dict(scope["headers"])
    entry = {"type": scope["type"], "path": scope["path"]}
    for name in ("x-request-id", "traceparent", "tracestate"):
        if name.encode() in headers:
            entry[name] = headers[name.encode()].decode()
    with open(path, "a") as log:
        log.write(json.dumps(entry) + "\n")


async def app(scope, receive, send):
    """keycloak-connect in front of the server: no valid bearer, no GraphQL."""
    record_trace(scope)
    if scope["type"] == "http" and scope["path"] == "/_peer/subscribers":
        # For tests: legacy graphql-ws never acknowledges a subscription, so only the server knows it is live.
        body = json.dumps({event: len(queues) for event, queues in subscribers.items()}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
        return
    if scope["type"] == "http":
        authorization = dict(scope["headers"]).get(b"authorization", b"").decode()
        if not bearer_accepted(authorization):
            if os.environ.get("TASK_SERVER_ON_DENIED") == "redirect":
                location = b"http://127.0.0.1/auth/realms/showcase/protocol/openid-connect/auth?client_id=sync"
                await send({"type": "http.response.start", "status": 302, "headers": [(b"location", location), (b"content-length", b"0")]})
                await send({"type": "http.response.body", "body": b""})
            else:
                await send({"type": "http.response.start", "status": 403, "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"Access denied"})
            return
    await graphql_app(scope, receive, send)


app = RequestLog(app)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
