"""Two Foyer instances on one PostgreSQL database, behind nginx with the example configuration
(scripts/nginx/foyer.conf): they behave as one. The suite's PostgreSQL cluster comes from scripts/test
(FOYER_TEST_POSTGRES_URL, FOYER_TEST_POSTGRES_DIR); each pair of instances gets a database of its own."""
import concurrent.futures
import getpass
import json
import os
import pathlib
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from conftest import REPO, KeycloakPeer, RunningServer, TaskServer, foyer_binary, free_port, wait_until
from test_browser import browser  # noqa: F401  (the shared Chromium fixture)
from test_graphql import post, session_token
from test_graphql_apollo import ApolloAPQClient
from test_live import follow
from test_posts_browser import sign_in
from test_push import BOB_EMAIL, BOB_PASSWORD, PUSH_ENV, add_user, push_args, register_ios_device, ups  # noqa: F401
from test_push import sign_in as push_sign_in

PSQL = "/usr/lib/postgresql/15/bin/psql"


def postgres_url() -> str:
    url = os.environ.get("FOYER_TEST_POSTGRES_URL")
    if not url:
        pytest.fail("FOYER_TEST_POSTGRES_URL is not set: scripts/test starts a PostgreSQL cluster for these tests")
    return url


def fresh_database() -> str:
    """A new database on the suite's cluster; its postgres:// URL."""
    url = urllib.parse.urlsplit(postgres_url())
    name = "instances_" + uuid.uuid4().hex[:12]
    subprocess.run(
        [PSQL, "-h", url.hostname, "-p", str(url.port), "-U", url.username, "-d", "postgres", "-qc", f"CREATE DATABASE {name}"],
        env=dict(os.environ, PGPASSWORD=url.password), check=True, timeout=30,
    )
    return urllib.parse.urlunsplit(url._replace(path="/" + name))


class Balancer:
    """nginx running scripts/nginx/foyer.conf, with the example's ports replaced by the instances'."""

    def __init__(self, workdir: pathlib.Path, instances: list[RunningServer], worker_connections: int = 256):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        example = (REPO / "scripts/nginx/foyer.conf").read_text()
        servers = iter(instance.port for instance in instances)
        site = re.sub(r"server 127\.0\.0\.1:808[12]", lambda _: f"server 127.0.0.1:{next(servers)}", example)
        site = site.replace("listen 8080;", f"listen 127.0.0.1:{self.port};")
        (workdir / "foyer.conf").write_text(site)
        (workdir / "nginx.conf").write_text(f"""
worker_processes 1;
# Workers as this user, not nginx's default `nobody`: they write request bodies under the test's own folder.
user {getpass.getuser()};
daemon off;
error_log {workdir}/error.log warn;
pid {workdir}/nginx.pid;
events {{ worker_connections {worker_connections}; }}
http {{
  access_log off;
  client_body_temp_path {workdir}/body; proxy_temp_path {workdir}/proxy;
  fastcgi_temp_path {workdir}/fastcgi; uwsgi_temp_path {workdir}/uwsgi; scgi_temp_path {workdir}/scgi;
  include {workdir}/foyer.conf;
}}
""")
        self.process = subprocess.Popen(["nginx", "-p", str(workdir), "-c", str(workdir / "nginx.conf")])
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(self.url + "/up", timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("nginx did not start: " + (workdir / "error.log").read_text())
                time.sleep(0.1)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


def request(url: str, method: str = "GET", token: str | None = None, body: dict | None = None, headers: dict | None = None) -> tuple[int, bytes, dict]:
    headers = {"Accept": "application/json", **(headers or {})}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method, data=data, headers=headers), timeout=30) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read(), dict(error.headers)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Instances A and B on one new database (embedded task service), and nginx in front of both."""
    database = fresh_database()
    a = RunningServer(tmp_path_factory.mktemp("instance-a"), database=database, extra_args=["--trust-proxy"])
    b = RunningServer(tmp_path_factory.mktemp("instance-b"), database=database, extra_args=["--trust-proxy"])
    balancer = Balancer(tmp_path_factory.mktemp("nginx"), [a, b])
    yield a, b, balancer
    balancer.stop()
    for instance in (a, b):
        assert instance.stop() == 0, instance.log_path.read_text()


def test_the_balancer_spreads_requests_over_both_instances_and_one_demo_account_was_made(pair):
    a, b, balancer = pair
    def served(instance) -> int:
        return instance.log_path.read_text().count("] GET /up 200")

    before = [served(a), served(b)]
    for _ in range(6):
        assert request(balancer.url + "/up")[0] == 200
    # Each instance logs a request as it finishes it: wait until both have logged all six.
    wait_until(lambda: served(a) - before[0] + served(b) - before[1] >= 6, seconds=5, what="both instances logging the six requests")
    assert [served(a) - before[0], served(b) - before[1]] == [3, 3], "round robin: three each"
    # Both started on an empty database at once: one demo account, one set of sample posts.
    status, body, _ = request(a.url + "/posts.json")
    posts = [(post["id"], post["title"]) for post in json.loads(body)]
    assert status == 200 and len(posts) == len({title for _, title in posts}) > 0
    assert [(post["id"], post["title"]) for post in json.loads(request(b.url + "/posts.json")[1])] == posts


def test_a_token_from_the_balancer_works_on_each_instance_and_a_revocation_reaches_the_other_within_a_second(pair):
    a, b, balancer = pair
    token = session_token(balancer)
    for instance in (a, b):  # each caches the session now
        status, body, _ = request(instance.url + "/api/v1/me", token=token)
        assert status == 200, body
    status, body, _ = request(b.url + "/api/v1/sessions/current", method="DELETE", token=token)
    assert status == 204, body
    revoked = time.monotonic()
    while request(a.url + "/api/v1/me", token=token)[0] != 401:
        assert time.monotonic() - revoked < 1, "instance A still takes a token revoked on B"
        time.sleep(0.02)


def test_a_post_created_on_one_instance_is_in_the_others_list_at_once(pair):
    a, b, _ = pair
    token = session_token(a)
    before = request(b.url + "/posts.json")[1]  # B caches its list now
    title = f"Written on A {time.time_ns()}"
    status, body, _ = request(a.url + "/api/v1/posts", method="POST", token=token, body={"title": title, "content": "shared"})
    assert status == 201, body
    deadline = time.monotonic() + 1
    while True:
        status, body, _ = request(b.url + "/posts.json")
        if title in [post["title"] for post in json.loads(body)]:
            break
        assert time.monotonic() < deadline, "B's list still lacks a post written on A"
        time.sleep(0.01)
    assert body != before


def test_a_block_and_a_removal_made_on_one_instance_hold_at_once_on_the_other_cached_reads_included(pair):
    a, b, _ = pair
    suffix = time.time_ns()
    author, reader, moderator = (f"{who}-{suffix}@example.com" for who in ("author", "reader", "moderator"))
    for email in (author, reader, moderator):
        add_user(a, email, "a password long enough")
    made = subprocess.run(
        [foyer_binary(), "user", "role", moderator, "moderator", "--database", str(a.database)],
        capture_output=True, text=True, timeout=60,
    )
    assert made.returncode == 0, made.stderr
    tokens = {email: session_token(a, email, "a password long enough") for email in (author, reader, moderator)}
    made_posts = []
    for title in ("Kept apart", "Taken down"):
        status, body, _ = request(a.url + "/api/v1/posts", method="POST", token=tokens[author], body={"title": f"{title} {suffix}", "content": "."})
        assert status == 201, body
        made_posts.append(json.loads(body)["id"])
    blocked_post, removed_post = made_posts

    def on_b(path: str, token: str | None = None) -> tuple[int, object]:
        status, body, _ = request(b.url + path, token=token)
        return status, json.loads(body)

    def listed(token: str | None = None) -> list[int]:
        return [post["id"] for post in on_b("/posts.json?per_page=100", token)[1]]

    def within_a_second(check, what: str):
        deadline = time.monotonic() + 1
        while not check():
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    # B keeps both lists and the point read before anything happens.
    assert blocked_post in listed(tokens[reader]) and blocked_post in listed()
    assert on_b(f"/api/v1/posts/{blocked_post}", tokens[reader])[0] == 200

    status, body, _ = request(a.url + "/api/v1/blocks", method="POST", token=tokens[reader], body={"user_id": json.loads(
        request(a.url + f"/api/v1/posts/{blocked_post}")[1])["author"]["id"]})
    assert status == 201, body
    within_a_second(lambda: blocked_post not in listed(tokens[reader]), "B still lists the blocked author's post to the blocker")
    assert on_b(f"/api/v1/posts/{blocked_post}", tokens[reader])[0] == 404
    assert blocked_post in listed(), "signed out, B lists it still"

    # A report through A, the removal by a moderator through A: B's kept list and point read let the post go.
    assert on_b(f"/api/v1/posts/{removed_post}")[0] == 200
    status, body, _ = request(a.url + "/api/v1/reports", method="POST", token=session_token(a), body={"post_id": removed_post, "reason": "spam"})
    assert status == 201, body
    report = json.loads(body)["id"]
    status, body, _ = request(
        a.url + f"/api/v1/moderation/reports/{report}/actions", method="POST", token=tokens[moderator],
        body={"action": "remove_post", "note": "Spam."},
    )
    assert status == 200, body
    within_a_second(lambda: removed_post not in listed(), "B still lists the removed post")
    assert on_b(f"/api/v1/posts/{removed_post}")[0] == 404


def test_twenty_writes_from_one_read_spread_over_both_instances_land_once(pair):
    a, b, _ = pair
    token = session_token(a)
    status, body, headers = request(a.url + "/api/v1/posts", method="POST", token=token, body={"title": "Raced", "content": "."})
    assert status == 201 and headers["ETag"] == '"1"', body
    post_id = json.loads(body)["id"]

    def put(number: int) -> int:
        instance = (a, b)[number % 2]
        return request(
            f"{instance.url}/api/v1/posts/{post_id}", method="PUT", token=token, body={"title": f"Writer {number}"}, headers={"If-Match": '"1"'},
        )[0]

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        statuses = list(pool.map(put, range(20)))
    assert sorted(statuses) == [200] + [412] * 19, statuses
    for instance in (a, b):
        status, body, headers = request(f"{instance.url}/api/v1/posts/{post_id}")
        assert json.loads(body)["version"] == 2 and headers["ETag"] == '"2"'


def test_a_persisted_query_registered_through_one_instance_is_known_to_the_other(pair):
    a, b, _ = pair
    document = f"query SharedAPQ{time.time_ns()} {{ allTasks {{ id }} }}"
    on_a = ApolloAPQClient(a.url, session_token(a))
    assert on_a.execute(document).status_code == 200
    assert on_a.sent == [("POST", False), ("POST", True)]
    on_b = ApolloAPQClient(b.url, session_token(b), use_get=True)
    answer = on_b.execute(document)
    assert answer.status_code == 200 and isinstance(answer.json()["data"]["allTasks"], list), answer.text
    assert on_b.sent == [("GET", False)], "B knew the hash from the shared database"


def test_failed_sign_ins_count_whichever_instance_saw_them(pair):
    a, b, _ = pair
    login = f"guess-{time.time_ns()}@example.com"
    for attempt in range(5):
        status, _, _ = request((a, b)[attempt % 2].url + "/api/v1/sessions", method="POST", body={"email": login, "password": "a wrong guess"})
        assert status == 401
    for instance in (a, b):
        status, body, headers = request(instance.url + "/api/v1/sessions", method="POST", body={"email": login, "password": "a wrong guess"})
        assert status == 429 and int(headers["Retry-After"]) > 0, body


def test_a_page_held_open_on_one_instance_shows_a_task_created_through_the_other(pair, browser):  # noqa: F811
    a, b, _ = pair
    page = browser.new_page()
    sign_in(page, a)
    follow(page, a.url + "/tasks")
    title = f"Made through B {time.time_ns()}"
    status, body = post(b.url + "/graphql", {
        "query": "mutation($title: String!) { createTask(title: $title, description: \"across instances\") { id } }",
        "variables": {"title": title},
    }, session_token(b))
    assert status == 200 and b"errors" not in body, body
    page.locator("li.task", has_text=title).wait_for(timeout=2000)
    # A task too large for one NOTIFY (8,000 bytes) travels by its id and is read from the database there.
    long_title = f"Long, made through B {time.time_ns()}"
    status, body = post(b.url + "/graphql", {
        "query": "mutation($title: String!, $description: String!) { createTask(title: $title, description: $description) { id } }",
        "variables": {"title": long_title, "description": "many words " * 1500},
    }, session_token(b))
    assert status == 200 and b"errors" not in body, body
    page.locator("li.task", has_text=long_title).wait_for(timeout=2000)
    assert page.evaluate("window.neverReloaded") is True
    page.close()


def test_postgres_stopped_and_started_means_503s_then_200s_without_restarting_foyer(pair):
    a, b, balancer = pair
    cluster = os.environ.get("FOYER_TEST_POSTGRES_DIR")
    if not cluster:
        pytest.fail("FOYER_TEST_POSTGRES_DIR is not set: scripts/test starts the cluster this test stops")
    paths = ["/healthz", "/posts.json", "/api/v1/posts/1"]
    assert all(request(a.url + path)[0] == 200 for path in paths)
    subprocess.run([str(REPO / "scripts/postgres-cluster"), "stop", cluster], check=True, timeout=60)
    try:
        deadline = time.monotonic() + 10
        down = {}
        while len(down) < len(paths) * 2 and time.monotonic() < deadline:
            for instance in (a, b):
                for path in paths:
                    status, body, _ = request(instance.url + path)
                    if status == 503:
                        down[(instance.port, path)] = body
            time.sleep(0.1)
        # Not even the post list cached a moment ago: it was dropped when the instance stopped hearing the others.
        assert {path for _, path in down} == set(paths), down
        assert any(b"database" in body.lower() for body in down.values())
    finally:
        subprocess.run([str(REPO / "scripts/postgres-cluster"), "start", cluster], check=True, timeout=60, capture_output=True)
    deadline = time.monotonic() + 15
    while not all(request(instance.url + path)[0] == 200 for instance in (a, b) for path in paths):
        assert time.monotonic() < deadline, "Foyer did not recover by itself once PostgreSQL was back"
        time.sleep(0.2)
    assert a.process.poll() is None and b.process.poll() is None, "no restart of Foyer"
    # Listening resumed too: a post on B reaches A's cached list again.
    token = session_token(b)
    request(a.url + "/posts.json")
    title = f"After the outage {time.time_ns()}"
    assert request(b.url + "/api/v1/posts", method="POST", token=token, body={"title": title})[0] == 201
    deadline = time.monotonic() + 2
    while title not in request(a.url + "/posts.json")[1].decode():
        assert time.monotonic() < deadline
        time.sleep(0.05)


# The realm announces 32 s lifetimes and Foyer refreshes 30 s before expiry: 2 s after sign-in it must.
ANNOUNCED_LIFETIME = 32


@pytest.fixture(scope="module")
def keycloak_pair(tmp_path_factory):
    """A and B signing in with Keycloak and relaying its tokens to a task server that checks them."""
    workdir = tmp_path_factory.mktemp("instances-realm")
    trace = workdir / "realm-requests.jsonl"
    realm = KeycloakPeer(workdir, expires_in=ANNOUNCED_LIFETIME, extra_env={"PEER_TRACE_LOG": str(trace)})
    tasks = TaskServer(tmp_path_factory.mktemp("instances-tasks"), token=None, extra_env={
        "TASK_SERVER_JWKS_URL": realm.issuer + "/protocol/openid-connect/certs", "TASK_SERVER_ISSUER": realm.issuer,
    })
    database = fresh_database()
    env = {"FOYER_KEYCLOAK_CLIENT_SECRET": realm.client_secret}
    args = [*realm.foyer_args(), "--graphql-url", tasks.url]
    a = RunningServer(tmp_path_factory.mktemp("realm-a"), database=database, extra_env=env, extra_args=args)
    b = RunningServer(tmp_path_factory.mktemp("realm-b"), database=database, extra_env=env, extra_args=args)
    yield a, b, trace
    for instance in (a, b):
        instance.stop()
    tasks.stop()
    realm.stop()


def test_parallel_requests_on_both_instances_after_the_token_expired_refresh_it_once(keycloak_pair):
    a, b, trace = keycloak_pair
    status, body, headers = request(a.url + "/api/v1/sessions", method="POST", body={"username": "ada", "password": "ada password"})
    assert status == 201, body
    token = headers["X-Session-Token"]
    time.sleep(ANNOUNCED_LIFETIME - 30 + 0.5)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: request((a, b)[i % 2].url + "/tasks.json", token=token), range(8)))
    assert [status for status, _, _ in answers] == [200] * 8, [body[:200] for _, body, _ in answers]
    grants = [json.loads(line).get("grant_type") for line in trace.read_text().splitlines()]
    assert grants.count("refresh_token") == 1, grants


def test_with_a_remote_task_server_each_upstream_event_is_pushed_once_and_never_to_its_author(tmp_path_factory, ups, task_server):  # noqa: F811
    """Both instances hear every event of the task server's subscription; one of them sends it on, and it knows who
    made a change even when the other instance made it."""
    database = fresh_database()
    env = {**PUSH_ENV, "FOYER_GRAPHQL_TOKEN": task_server.token}
    args = [*push_args(ups), "--graphql-url", task_server.url]
    a = RunningServer(tmp_path_factory.mktemp("push-a"), database=database, extra_env=env, extra_args=args)
    b = RunningServer(tmp_path_factory.mktemp("push-b"), database=database, extra_env=env, extra_args=args)
    try:
        add_user(a, BOB_EMAIL, BOB_PASSWORD)
        demo_token, demo_id = push_sign_in(a)
        bob_token, bob_id = push_sign_in(b, BOB_EMAIL, BOB_PASSWORD)
        register_ios_device(a, demo_token)
        register_ios_device(b, bob_token)
        for instance in (a, b):
            wait_until(lambda: "Following the upstream's task events" in instance.log_path.read_text(), what="the task feed")
        wait_until(lambda: any("acts for all" in i.log_path.read_text() for i in (a, b)), what="a leader")
        create = "mutation($title: String!) { createTask(title: $title, description: \"two instances\") { id } }"

        for (instance, token, author, other) in ((a, demo_token, demo_id, bob_id), (b, bob_token, bob_id, demo_id)):
            title = f"made on {instance.port} {time.time_ns()}"
            status, created = post(instance.url + "/graphql", {"query": create, "variables": {"title": title}}, token)
            assert status == 200, created
            task_id = json.loads(created)["data"]["createTask"]["id"]

            def about_it():
                return [m for m in ups.sent() if m["message"]["user-data"]["taskId"] == task_id and title in m["message"]["alert"]]
            wait_until(about_it, what="a message about the task")
            time.sleep(2)  # a second instance's message would come within its second of author grace
            messages = about_it()
            assert len(messages) == 1, messages
            assert messages[0]["criteria"]["alias"] == [str(other)], (messages, author)
    finally:
        for instance in (a, b):
            instance.stop()


def test_a_picture_uploaded_through_one_instance_is_served_by_both_and_goes_from_both_with_its_post(pair, tmp_path):
    from test_pictures import camera_jpeg, fetch, upload
    a, b, balancer = pair
    token = session_token(balancer)
    photo = tmp_path / "shared.jpg"
    photo.write_bytes(camera_jpeg())
    # Through nginx as a browser would send it (nginx's default would refuse a body over 1 MB; the example allows 24).
    status, post = upload(balancer.url, token, photo, f"Shared picture {time.time_ns()}")
    assert status == 201, post
    # Absolute URLs name the balancer as the client reached it, port included.
    assert post["picture"]["url"].startswith(balancer.url + "/pictures/"), post["picture"]
    path = post["picture"]["url"].removeprefix(balancer.url)
    served = [fetch(instance.url + path) for instance in (a, b)]
    assert [status for status, _, _ in served] == [200, 200]
    assert served[0][2] == served[1][2] and served[0][1]["etag"] == served[1][1]["etag"]
    assert request(a.url + f"/api/v1/posts/{post['id']}", method="DELETE", token=token)[0] == 204
    assert [fetch(instance.url + path)[0] for instance in (a, b)] == [404, 404]
