"""The showcase task schema in strawberry-graphql: a second GraphQL upstream, one that checks `Origin` on websockets.

Run: python strawberry_task_server.py PORT
strawberry refuses a websocket handshake whose `Origin` names another host:port than `Host` (as a browser page on
another site would), and accepts one with no `Origin` (a server-to-server client). Subscriptions speak legacy
`graphql-ws` (what the showcase speaks) and `graphql-transport-ws`. Needs graphql-core 3.3, so it runs from the
clients' venv, not the ariadne peer's.
"""
import asyncio
import enum
import sys
import typing

import strawberry
import uvicorn
from strawberry.asgi import GraphQL
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL, GRAPHQL_WS_PROTOCOL

from request_log import RequestLog


@strawberry.enum
class TaskStatus(enum.Enum):
    OPEN = "OPEN"
    ASSIGNED = "ASSIGNED"
    COMPLETE = "COMPLETE"


@strawberry.type
class Task:
    id: strawberry.ID
    version: int | None
    title: str
    description: str
    status: TaskStatus | None


tasks: dict[str, Task] = {}
subscribers: dict[str, set[asyncio.Queue]] = {"taskAdded": set(), "taskUpdated": set(), "taskDeleted": set()}


def publish(event: str, task: Task):
    for queue in subscribers[event]:
        queue.put_nowait(task)


async def follow(event: str) -> typing.AsyncGenerator[Task, None]:
    queue: asyncio.Queue = asyncio.Queue()
    subscribers[event].add(queue)
    try:
        while True:
            yield await queue.get()
    finally:
        subscribers[event].discard(queue)


@strawberry.type
class Query:
    @strawberry.field
    def all_tasks(self, first: int | None = None, after: str | None = None) -> list[Task | None]:
        ordered = sorted(tasks.values(), key=lambda task: int(task.id))
        offset = int(after) if after else 0
        return ordered[offset:] if first is None else ordered[offset:offset + first]

    @strawberry.field
    def get_task(self, id: strawberry.ID) -> Task | None:
        return tasks.get(id)


@strawberry.type
class Mutation:
    @strawberry.mutation
    def create_task(self, title: str, description: str, status: TaskStatus | None = None) -> Task | None:
        task = Task(id=strawberry.ID(str(len(tasks) + 1)), version=1, title=title, description=description,
                    status=status or TaskStatus.OPEN)
        tasks[task.id] = task
        publish("taskAdded", task)
        return task

    @strawberry.mutation
    def delete_task(self, id: strawberry.ID) -> strawberry.ID | None:
        task = tasks.pop(id, None)
        if task is None:
            return None
        publish("taskDeleted", task)
        return id


@strawberry.type
class Subscription:
    @strawberry.subscription
    async def task_added(self) -> typing.AsyncGenerator[Task | None, None]:
        async for task in follow("taskAdded"):
            yield task

    @strawberry.subscription
    async def task_updated(self) -> typing.AsyncGenerator[Task | None, None]:
        async for task in follow("taskUpdated"):
            yield task

    @strawberry.subscription
    async def task_deleted(self) -> typing.AsyncGenerator[Task | None, None]:
        async for task in follow("taskDeleted"):
            yield task


schema = strawberry.Schema(query=Query, mutation=Mutation, subscription=Subscription)
# No allowed_origins: only same-origin pages and clients that send no Origin get a websocket.
app = RequestLog(GraphQL(schema, subscription_protocols=[GRAPHQL_WS_PROTOCOL, GRAPHQL_TRANSPORT_WS_PROTOCOL]))

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
