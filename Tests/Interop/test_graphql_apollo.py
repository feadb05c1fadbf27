"""What Apollo clients send in production, through Foyer to real upstreams (ariadne and strawberry): automatic
persisted queries over POST and GET, trusted documents from a manifest, batches (gql's batching client), and the
introspection switch."""
import hashlib
import json

import pytest
import requests
from gql import Client, GraphQLRequest, gql
from gql.transport.exceptions import TransportQueryError
from gql.transport.requests import RequestsHTTPTransport

from conftest import RunningServer
from test_graphql import session_token
from test_upstream_origin import strawberry  # noqa: F401  (the strawberry peer)

ALL_TASKS = "query AllTasks { allTasks { id title } }"
CREATE_TASK = "mutation CreateTask($title: String!) { createTask(title: $title, description: \"APQ\") { id title } }"


class ApolloAPQClient:
    """Apollo's persisted query link, as its documentation lays the protocol out: send the SHA-256 of the document
    alone (as GET for queries when `use_get`); on PERSISTED_QUERY_NOT_FOUND send it again with the document, by POST.
    `sent` records each request as (method, carried the document)."""

    def __init__(self, url: str, token: str, use_get: bool = False):
        self.url = url + "/graphql"
        self.use_get = use_get
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.sent: list[tuple[str, bool]] = []

    def execute(self, document: str, variables: dict | None = None, operation_name: str | None = None) -> requests.Response:
        extensions = {"persistedQuery": {"version": 1, "sha256Hash": hashlib.sha256(document.encode()).hexdigest()}}
        is_query = not document.lstrip().startswith(("mutation", "subscription"))
        response = self._send("GET" if self.use_get and is_query else "POST", None, variables, operation_name, extensions)
        if not self.not_found(response):
            return response
        return self._send("POST", document, variables, operation_name, extensions)

    @staticmethod
    def not_found(response: requests.Response) -> bool:
        try:
            errors = response.json().get("errors") or []
        except ValueError:
            return False
        return any(e.get("message") == "PersistedQueryNotFound" or (e.get("extensions") or {}).get("code") == "PERSISTED_QUERY_NOT_FOUND" for e in errors)

    def _send(self, method, document, variables, operation_name, extensions) -> requests.Response:
        self.sent.append((method, document is not None))
        if method == "GET":
            params = {"extensions": json.dumps(extensions)}
            if variables:
                params["variables"] = json.dumps(variables)
            if operation_name:
                params["operationName"] = operation_name
            return self.session.get(self.url, params=params, timeout=30)
        body = {"extensions": extensions, "variables": variables or {}}
        if document is not None:
            body["query"] = document
        if operation_name:
            body["operationName"] = operation_name
        return self.session.post(self.url, json=body, timeout=30)


@pytest.fixture(scope="module")
def strawberry_foyer(tmp_path_factory, strawberry):  # noqa: F811
    running = RunningServer(tmp_path_factory.mktemp("foyer-strawberry-apq"), extra_args=["--graphql-url", strawberry])
    yield running
    running.stop()


@pytest.fixture(params=["ariadne", "strawberry"])
def proxied(request):
    """Foyer in front of each real upstream."""
    return request.getfixturevalue("upstream_foyer" if request.param == "ariadne" else "strawberry_foyer")


@pytest.mark.parametrize("use_get", [False, True], ids=["POST", "GET"])
def test_an_apq_client_registers_once_then_sends_only_the_hash(proxied, use_get):
    client = ApolloAPQClient(proxied.url, session_token(proxied), use_get=use_get)
    # A document of this test's own, so an earlier test cannot have registered it.
    document = ALL_TASKS.replace("AllTasks", f"AllTasks{'Get' if use_get else 'Post'}")
    first = client.execute(document)
    assert first.status_code == 200, first.text
    assert isinstance(first.json()["data"]["allTasks"], list)
    method = "GET" if use_get else "POST"
    assert client.sent == [(method, False), ("POST", True)], "asked for the document once"

    client.sent.clear()
    second = client.execute(document)
    assert second.status_code == 200 and isinstance(second.json()["data"]["allTasks"], list), second.text
    assert client.sent == [(method, False)], "the hash alone was enough"


def test_a_persisted_mutation_runs_with_its_variables(proxied):
    client = ApolloAPQClient(proxied.url, session_token(proxied))
    for title in ("Persisted one", "Persisted two"):
        response = client.execute(CREATE_TASK, {"title": title}, "CreateTask")
        assert response.status_code == 200 and response.json()["data"]["createTask"]["title"] == title, response.text
    assert client.sent == [("POST", False), ("POST", True), ("POST", False)]


def test_a_mutation_is_refused_over_get_and_a_hash_mismatch_is_a_400(upstream_foyer):
    token = session_token(upstream_foyer)
    headers = {"Authorization": f"Bearer {token}"}
    registered = requests.post(upstream_foyer.url + "/graphql", headers=headers, timeout=30, json={
        "query": CREATE_TASK, "variables": {"title": "Registered by POST"},
        "extensions": {"persistedQuery": {"version": 1, "sha256Hash": hashlib.sha256(CREATE_TASK.encode()).hexdigest()}},
    })
    assert registered.status_code == 200, registered.text
    over_get = requests.get(upstream_foyer.url + "/graphql", headers=headers, timeout=30, params={
        "extensions": json.dumps({"persistedQuery": {"version": 1, "sha256Hash": hashlib.sha256(CREATE_TASK.encode()).hexdigest()}}),
        "variables": json.dumps({"title": "Over GET"}),
    })
    assert over_get.status_code == 405 and over_get.headers["Allow"] == "POST", over_get.text
    assert over_get.json()["errors"][0]["extensions"]["code"] == "METHOD_NOT_ALLOWED"

    mismatch = requests.post(upstream_foyer.url + "/graphql", headers=headers, timeout=30, json={
        "query": ALL_TASKS, "extensions": {"persistedQuery": {"version": 1, "sha256Hash": hashlib.sha256(b"{ other }").hexdigest()}},
    })
    assert mismatch.status_code == 400
    assert mismatch.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_HASH_MISMATCH"


def test_gql_batches_three_operations_and_one_fails_alone(proxied):
    transport = RequestsHTTPTransport(url=proxied.url + "/graphql", headers={"Authorization": f"Bearer {session_token(proxied)}"}, timeout=30)
    # gql's batching transport itself: the client above it raises on the first result with errors, hiding the rest.
    requests_batch = [
        GraphQLRequest(gql(CREATE_TASK), variable_values={"title": "Batched"}),
        GraphQLRequest(gql("query Missing { noSuchField }")),
        GraphQLRequest(gql(ALL_TASKS)),
    ]
    transport.connect()
    try:
        results = transport.execute_batch(requests_batch)
    finally:
        transport.close()
    assert len(results) == 3
    assert results[0].data["createTask"]["title"] == "Batched"
    assert results[1].errors, "the invalid one has its errors"
    assert "Batched" in [task["title"] for task in results[2].data["allTasks"]], "the query after the mutation sees it"


def test_a_batch_over_the_limit_is_refused_whole(server):
    token = session_token(server)
    response = requests.post(server.url + "/graphql", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                             json=[{"query": ALL_TASKS}] * 11)
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "BATCH_TOO_LARGE"


@pytest.fixture(scope="module")
def trusted_foyer(tmp_path_factory, task_server):
    workdir = tmp_path_factory.mktemp("foyer-trusted")
    manifest = {
        "format": "apollo-persisted-query-manifest", "version": 1,
        "operations": [
            {"id": hashlib.sha256(ALL_TASKS.encode()).hexdigest(), "name": "AllTasks", "type": "query", "body": ALL_TASKS},
            {"id": hashlib.sha256(CREATE_TASK.encode()).hexdigest(), "name": "CreateTask", "type": "mutation", "body": CREATE_TASK},
        ],
    }
    (workdir / "persisted-query-manifest.json").write_text(json.dumps(manifest))
    running = RunningServer(
        workdir, extra_env={"FOYER_GRAPHQL_TOKEN": task_server.token},
        extra_args=["--graphql-url", task_server.url, "--graphql-trusted-documents", str(workdir / "persisted-query-manifest.json"),
                    "--graphql-introspection=false"],
    )
    yield running
    running.stop()


def test_with_trusted_documents_listed_ones_run_by_id_and_by_body_and_others_are_refused(trusted_foyer):
    token = session_token(trusted_foyer)
    client = ApolloAPQClient(trusted_foyer.url, token, use_get=True)
    by_id = client.execute(ALL_TASKS)
    assert by_id.status_code == 200 and isinstance(by_id.json()["data"]["allTasks"], list), by_id.text
    assert client.sent == [("GET", False)], "known by its id at once"

    headers = {"Authorization": f"Bearer {token}"}
    by_body = requests.post(trusted_foyer.url + "/graphql", headers=headers, json={"query": CREATE_TASK, "variables": {"title": "Trusted"}}, timeout=30)
    assert by_body.status_code == 200 and by_body.json()["data"]["createTask"]["title"] == "Trusted", by_body.text

    unlisted = requests.post(trusted_foyer.url + "/graphql", headers=headers, json={"query": "{ allTasks { description } }"}, timeout=30)
    assert unlisted.status_code == 400
    assert unlisted.json()["errors"][0]["extensions"]["code"] == "QUERY_NOT_IN_SAFELIST"
    unknown = ApolloAPQClient(trusted_foyer.url, token).execute("{ allTasks { status } }")
    assert unknown.status_code == 400
    assert unknown.json()["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_IN_LIST"

    introspection = requests.post(trusted_foyer.url + "/graphql", headers=headers, json={"query": "{ __schema { types { name } } }"}, timeout=30)
    assert introspection.status_code == 400, "refused: not in the manifest (and introspection is off)"

    metrics = requests.get(trusted_foyer.url + "/metrics", timeout=10).text
    assert 'foyer_graphql_refusals_total{reason="untrusted"} 3' in metrics

    # The task pages' own operations are not a client's: they still run.
    page = requests.get(trusted_foyer.url + "/tasks", headers=headers, timeout=30)
    assert page.status_code == 200 and "Trusted" in page.text


def test_introspection_can_be_turned_off_for_gql_too(tmp_path):
    running = RunningServer(tmp_path, extra_args=["--graphql-introspection=false"])
    try:
        transport = RequestsHTTPTransport(url=running.url + "/graphql", headers={"Authorization": f"Bearer {session_token(running)}"}, timeout=30)
        # gql asks for the schema first; the refusal reaches it as the GraphQL error it is, not as a failed transport.
        with pytest.raises(TransportQueryError) as refused:
            Client(transport=transport, fetch_schema_from_transport=True).execute(gql(ALL_TASKS))
        assert "Error while fetching schema" in str(refused.value), str(refused.value)
        assert [error["extensions"]["code"] for error in refused.value.errors] == ["INTROSPECTION_DISABLED"], refused.value.errors
        plain = Client(transport=RequestsHTTPTransport(
            url=running.url + "/graphql", headers={"Authorization": f"Bearer {session_token(running)}"}, timeout=30))
        assert isinstance(plain.execute(gql(ALL_TASKS))["allTasks"], list)
    finally:
        running.stop()
