"""The `foyer` command line: migrate, user add, flags over environment, graceful shutdown."""
import json
import os
import subprocess
import urllib.request

import pytest

from conftest import RunningServer, foyer_binary


def test_user_add_reads_the_password_from_stdin_and_the_server_accepts_it(server):
    added = subprocess.run(
        [foyer_binary(), "user", "add", "grace@example.com", "--database", str(server.database)],
        input="hopper's password\n", capture_output=True, text=True, timeout=60,
    )
    assert added.returncode == 0, added.stderr
    request = urllib.request.Request(
        server.url + "/api/v1/sessions", method="POST",
        data=json.dumps({"email": "grace@example.com", "password": "hopper's password"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        assert response.headers["X-Session-Token"]

    duplicate = subprocess.run(
        [foyer_binary(), "user", "add", "grace@example.com", "--database", str(server.database)],
        input="another password\n", capture_output=True, text=True, timeout=60,
    )
    assert duplicate.returncode != 0
    assert "already exists" in duplicate.stderr


def test_database_flag_wins_over_environment(tmp_path):
    from_env, from_flag = tmp_path / "env.sqlite", tmp_path / "flag.sqlite"
    migrated = subprocess.run(
        [foyer_binary(), "migrate", "--database", str(from_flag)],
        env=dict(os.environ, FOYER_DATABASE=str(from_env)), capture_output=True, text=True, timeout=60,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert from_flag.exists() and not from_env.exists()

    subprocess.run([foyer_binary(), "migrate"], env=dict(os.environ, FOYER_DATABASE=str(from_env)), check=True, timeout=60)
    assert from_env.exists()


def test_sigterm_stops_the_server_cleanly(tmp_path):
    running = RunningServer(tmp_path)
    assert running.stop() == 0
    assert "Created the demo account" in running.log_path.read_text()


@pytest.mark.parametrize("flag, content, message", [
    ("--path-configuration", '{"rules": [{"patterns": ["(unclosed"], "properties": {}}]}', '"(unclosed" is not a valid regular expression'),
    ("--mobile-services", '{"version": 1, "services": [{"type": "sync-app"}]}', "services[0] (sync-app) needs a url"),
])
def test_a_broken_file_stops_start_up_with_a_message_naming_the_problem(tmp_path, flag, content, message):
    broken = tmp_path / "broken.json"
    broken.write_text(content)
    started = subprocess.run(
        [foyer_binary(), "serve", "--port", "0", "--database", str(tmp_path / "db.sqlite"), flag, str(broken)],
        capture_output=True, text=True, timeout=60,
    )
    assert started.returncode != 0
    assert message in started.stderr


@pytest.mark.parametrize("flag, value, env, message", [
    ("--graphql-rate-limit", "lots", "FOYER_GRAPHQL_RATE_LIMIT", '--graphql-rate-limit: "lots" is not a rate limit; write operations per second, minute or hour (300/min, 20/s, 5000/h), or off'),
    ("--graphql-rate-limit", "0/min", "FOYER_GRAPHQL_RATE_LIMIT", '"0/min" is not a rate limit'),
    ("--graphql-cache", "forever", "FOYER_GRAPHQL_CACHE", '--graphql-cache: "forever" is not a duration; write e.g. 30d, 12h, 45m, 90s or a number of seconds, or off'),
    ("--graphql-cache-scope", "everyone", "FOYER_GRAPHQL_CACHE_SCOPE", '--graphql-cache-scope: "everyone" is not a scope; write user or shared'),
    ("--smtp-url", "mail.example.com:25", "FOYER_SMTP_URL", '--smtp-url: "mail.example.com:25" is not an SMTP URL; write smtp://[user:password@]host[:port] or smtps://'),
    ("--smtp-url", "http://user:secret@mail.example.com", "FOYER_SMTP_URL", '"http://user:***@mail.example.com" is not an SMTP URL'),
    ("--mail-from", "Foyer", "FOYER_MAIL_FROM", "--mail-from: \"Foyer\" is not an address; write e.g. 'Foyer <no-reply@example.com>'"),
    ("--public-url", "example.com", "FOYER_PUBLIC_URL", '--public-url: "example.com" is not an origin; write e.g. https://example.com'),
])
def test_a_malformed_setting_stops_start_up_saying_which_and_what_is_accepted(tmp_path, flag, value, env, message):
    for arguments, environment in (([flag, value], {}), ([], {env: value})):
        started = subprocess.run(
            [foyer_binary(), "serve", "--port", "0", "--database", str(tmp_path / "db.sqlite"), *arguments],
            env=dict(os.environ, **environment), capture_output=True, text=True, timeout=60,
        )
        assert started.returncode != 0
        assert message in started.stderr, started.stderr
        assert "secret" not in started.stderr, "a password in a setting is never echoed"
