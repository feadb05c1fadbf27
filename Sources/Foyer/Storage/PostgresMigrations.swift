import Foundation
import PostgresNIO

/// Foyer's tables on PostgreSQL: the same tables and columns as the SQLite schema, in PostgreSQL's types.
/// Named migrations, in order, each applied once in its own transaction. Never edit one that has shipped.
enum PostgresMigrations {
    static let all: [(name: String, sql: [String])] = [
        ("1: the tables of SQLite's v1 to v10", [
            """
            CREATE TABLE users (
                id BIGSERIAL PRIMARY KEY,
                email TEXT NOT NULL,
                password_hash TEXT NOT NULL,
                created_at TIMESTAMPTZ NOT NULL,
                keycloak_subject TEXT UNIQUE
            )
            """,
            // SQLite compares emails with NOCASE; here an index on the lower-cased address does that job.
            "CREATE UNIQUE INDEX users_by_email ON users (lower(email))",
            """
            CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                user_id BIGINT NOT NULL REFERENCES users ON DELETE CASCADE,
                token_hash TEXT NOT NULL UNIQUE,
                csrf_token TEXT NOT NULL,
                user_agent TEXT,
                ip_address TEXT,
                created_at TIMESTAMPTZ NOT NULL,
                last_seen_at TIMESTAMPTZ NOT NULL,
                revoked_at TIMESTAMPTZ
            )
            """,
            "CREATE INDEX sessions_by_user ON sessions (user_id)",
            """
            CREATE TABLE posts (
                id BIGSERIAL PRIMARY KEY,
                title TEXT NOT NULL,
                content TEXT NOT NULL DEFAULT '',
                author_id BIGINT NOT NULL REFERENCES users ON DELETE CASCADE,
                created_at TIMESTAMPTZ NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL
            )
            """,
            "CREATE INDEX posts_by_author ON posts (author_id)",
            "CREATE INDEX posts_by_newest ON posts (created_at, id)",
            """
            CREATE TABLE tasks (
                id BIGSERIAL PRIMARY KEY,
                title TEXT NOT NULL,
                description TEXT NOT NULL,
                status TEXT NOT NULL DEFAULT 'OPEN',
                version INTEGER NOT NULL DEFAULT 1
            )
            """,
            """
            CREATE TABLE task_cache (
                user_id BIGINT NOT NULL REFERENCES users ON DELETE CASCADE,
                key TEXT NOT NULL,
                body BYTEA NOT NULL,
                cached_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (user_id, key)
            )
            """,
            """
            CREATE TABLE keycloak_tokens (
                session_id TEXT PRIMARY KEY REFERENCES sessions ON DELETE CASCADE,
                access_token TEXT NOT NULL,
                refresh_token TEXT,
                id_token TEXT,
                access_expires_at TIMESTAMPTZ NOT NULL,
                keycloak_session_id TEXT
            )
            """,
            "CREATE INDEX keycloak_tokens_by_session_id ON keycloak_tokens (keycloak_session_id)",
            """
            CREATE TABLE keycloak_sign_ins (
                state TEXT PRIMARY KEY,
                code_verifier TEXT NOT NULL,
                nonce TEXT NOT NULL,
                redirect_uri TEXT NOT NULL,
                return_to TEXT NOT NULL,
                created_at TIMESTAMPTZ NOT NULL
            )
            """,
            """
            CREATE TABLE server_secrets (
                name TEXT PRIMARY KEY,
                value BYTEA NOT NULL,
                created_at TIMESTAMPTZ NOT NULL
            )
            """,
            """
            CREATE TABLE sign_in_failures (
                id BIGSERIAL PRIMARY KEY,
                key TEXT NOT NULL,
                failed_at TIMESTAMPTZ NOT NULL
            )
            """,
            "CREATE INDEX sign_in_failures_by_time ON sign_in_failures (failed_at)",
            "CREATE INDEX sign_in_failures_by_key ON sign_in_failures (key, failed_at)",
            """
            CREATE TABLE push_devices (
                token TEXT PRIMARY KEY,
                user_id BIGINT NOT NULL REFERENCES users ON DELETE CASCADE,
                session_id TEXT REFERENCES sessions ON DELETE SET NULL,
                platform TEXT NOT NULL,
                operating_system TEXT,
                os_version TEXT,
                categories TEXT NOT NULL DEFAULT '[]',
                state TEXT NOT NULL,
                created_at TIMESTAMPTZ NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL
            )
            """,
            "CREATE INDEX push_devices_by_user ON push_devices (user_id)",
            "CREATE INDEX push_devices_by_session ON push_devices (session_id)",
            """
            CREATE TABLE push_outbox (
                id BIGSERIAL PRIMARY KEY,
                operation TEXT NOT NULL,
                device_token TEXT,
                platform TEXT,
                old_device_token TEXT,
                body BYTEA,
                attempts INTEGER NOT NULL DEFAULT 0,
                last_error TEXT,
                created_at TIMESTAMPTZ NOT NULL
            )
            """,
            "CREATE INDEX push_outbox_by_device ON push_outbox (device_token)",
        ]),
        ("2: leases, for work one instance at a time does (PostgresLeases)", [
            "CREATE TABLE foyer_leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, lapses_at TIMESTAMPTZ NOT NULL)",
        ]),
        ("3: cluster messages too large for a notification (ClusterBus)", [
            "CREATE TABLE foyer_cluster_messages (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL, sent_at TIMESTAMPTZ NOT NULL)",
            "CREATE INDEX foyer_cluster_messages_by_age ON foyer_cluster_messages (sent_at)",
        ]),
    ]

    /// An arbitrary constant: instances starting together take turns at the schema.
    private static let lockKey: Int64 = 0x666f_7965_725f_6462

    static func migrate(_ store: PostgresStore) async throws {
        let logger = store.logger
        try await store.transaction { connection in
            try await connection.run("SELECT pg_advisory_xact_lock(\(lockKey))", logger: logger)
            try await connection.run(
                "CREATE TABLE IF NOT EXISTS foyer_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)",
                logger: logger
            )
            var applied = Set<String>()
            for try await name in try await connection.query("SELECT name FROM foyer_migrations", logger: logger).decode(String.self) {
                applied.insert(name)
            }
            for migration in all where !applied.contains(migration.name) {
                for statement in migration.sql {
                    try await connection.run(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.run("INSERT INTO foyer_migrations (name, applied_at) VALUES (\(migration.name), \(Date()))", logger: logger)
                logger.info("Applied database migration", metadata: ["migration": .string(migration.name)])
            }
        }
    }
}
