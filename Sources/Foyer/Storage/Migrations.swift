import GRDB

// Foyer's schema, both ways, side by side: SQLite's (one instance) and PostgreSQL's (several instances sharing
// it). The same tables, columns and indexes in each store's types; `SchemaParityTests` compares them, so a
// change to one list needs its twin in the other. Named migrations, in order; never edit one that has shipped.

extension SQLiteStore {
    /// Named migrations, in order. Never edit one that has shipped: add another. A new database is made from
    /// what they make (`SQLiteSchemaSnapshot`): after adding one, `StorageTests` writes the new snapshot to copy in.
    public static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: users and sessions") { db in
            try db.create(table: "users") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("email", .text).notNull().unique(onConflict: .abort).collate(.nocase)
                t.column("password_hash", .text).notNull()
                t.column("created_at", .datetime).notNull()
            }
            try db.create(table: "sessions") { t in
                t.primaryKey("id", .text)
                t.column("user_id", .integer).notNull().indexed().references("users", onDelete: .cascade)
                // SHA-256 of the bearer token: a leaked database does not leak usable tokens.
                t.column("token_hash", .text).notNull().unique()
                t.column("csrf_token", .text).notNull()
                t.column("user_agent", .text)
                t.column("ip_address", .text)
                t.column("created_at", .datetime).notNull()
                t.column("last_seen_at", .datetime).notNull()
                t.column("revoked_at", .datetime)
            }
        }
        migrator.registerMigration("v2: posts") { db in
            try db.create(table: "posts") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("title", .text).notNull()
                t.column("content", .text).notNull().defaults(to: "")
                t.column("author_id", .integer).notNull().indexed().references("users", onDelete: .cascade)
                t.column("created_at", .datetime).notNull()
                t.column("updated_at", .datetime).notNull()
            }
            try db.create(index: "posts_by_newest", on: "posts", columns: ["created_at", "id"])
        }
        migrator.registerMigration("v3: tasks of the embedded GraphQL task service") { db in
            try db.create(table: "tasks") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("title", .text).notNull()
                t.column("description", .text).notNull()
                t.column("status", .text).notNull().defaults(to: "OPEN")
                t.column("version", .integer).notNull().defaults(to: 1)
            }
        }
        migrator.registerMigration("v4: offline copies of task reads") { db in
            try db.create(table: "task_cache") { t in
                t.column("user_id", .integer).notNull().references("users", onDelete: .cascade)
                t.column("key", .text).notNull()
                t.column("body", .blob).notNull()
                t.column("cached_at", .datetime).notNull()
                t.primaryKey(["user_id", "key"])
            }
        }
        migrator.registerMigration("v5: Keycloak accounts and their tokens") { db in
            // The realm's `sub` for users who sign in with Keycloak; their password_hash is unusable.
            try db.alter(table: "users") { t in t.add(column: "keycloak_subject", .text) }
            try db.create(index: "users_by_keycloak_subject", on: "users", columns: ["keycloak_subject"], unique: true)
            // Tokens stay server-side, one set per Foyer session.
            try db.create(table: "keycloak_tokens") { t in
                t.primaryKey("session_id", .text).references("sessions", onDelete: .cascade)
                t.column("access_token", .text).notNull()
                t.column("refresh_token", .text)
                t.column("id_token", .text)
                t.column("access_expires_at", .datetime).notNull()
            }
        }
        migrator.registerMigration("v6: Keycloak browser sign-ins under way") { db in
            // What the callback must check, kept here rather than in the browser: state, PKCE verifier, nonce.
            try db.create(table: "keycloak_sign_ins") { t in
                t.primaryKey("state", .text)
                t.column("code_verifier", .text).notNull()
                t.column("nonce", .text).notNull()
                t.column("redirect_uri", .text).notNull()
                t.column("return_to", .text).notNull()
                t.column("created_at", .datetime).notNull()
            }
        }
        migrator.registerMigration("v7: server secrets") { db in
            // Secrets the server makes for itself when none is configured (signing live stream names).
            try db.create(table: "server_secrets") { t in
                t.primaryKey("name", .text)
                t.column("value", .blob).notNull()
                t.column("created_at", .datetime).notNull()
            }
        }
        migrator.registerMigration("v8: sign-in failures") { db in
            // One row per failed sign-in under each key it counts against (the login, the client IP), for throttling.
            try db.create(table: "sign_in_failures") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("key", .text).notNull()
                t.column("failed_at", .datetime).notNull().indexed()
            }
            try db.create(index: "sign_in_failures_by_key", on: "sign_in_failures", columns: ["key", "failed_at"])
        }
        migrator.registerMigration("v9: Keycloak session ids") { db in
            // The realm's session (`sid` of the ID token): a back-channel logout names it.
            try db.alter(table: "keycloak_tokens") { t in t.add(column: "keycloak_session_id", .text) }
            try db.create(index: "keycloak_tokens_by_session_id", on: "keycloak_tokens", columns: ["keycloak_session_id"])
        }
        migrator.registerMigration("v10: push devices and their outbox") { db in
            // A device's token belongs to one user at a time; the session it was registered through ends it.
            try db.create(table: "push_devices") { t in
                t.primaryKey("token", .text)
                t.column("user_id", .integer).notNull().indexed().references("users", onDelete: .cascade)
                t.column("session_id", .text).indexed().references("sessions", onDelete: .setNull)
                t.column("platform", .text).notNull()
                t.column("operating_system", .text)
                t.column("os_version", .text)
                t.column("categories", .text).notNull().defaults(to: "[]")
                t.column("state", .text).notNull()
                t.column("created_at", .datetime).notNull()
                t.column("updated_at", .datetime).notNull()
            }
            // What Unified Push has yet to hear, in order: registrations, removals and messages.
            try db.create(table: "push_outbox") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("operation", .text).notNull()
                t.column("device_token", .text).indexed()
                t.column("platform", .text)
                t.column("old_device_token", .text)
                t.column("body", .blob)
                t.column("attempts", .integer).notNull().defaults(to: 0)
                t.column("last_error", .text)
                t.column("created_at", .datetime).notNull()
            }
        }
        migrator.registerMigration("v11: GraphQL documents clients registered by hash") { db in
            // Automatic persisted queries: the SHA-256 (hex) of a document and its text, shared by instances.
            try db.create(table: "graphql_documents") { t in
                t.primaryKey("hash", .text)
                t.column("body", .text).notNull()
                t.column("used_at", .datetime).notNull().indexed()
            }
        }
        migrator.registerMigration("v12: users of any identity provider") { db in
            // A user's identities: one `sub` per provider, several providers per user when linked.
            try db.create(table: "user_identities") { t in
                t.column("provider", .text).notNull()
                t.column("subject", .text).notNull()
                t.column("user_id", .integer).notNull().indexed().references("users", onDelete: .cascade)
                t.primaryKey(["provider", "subject"])
            }
            try db.execute(sql: "INSERT INTO user_identities (provider, subject, user_id) SELECT 'keycloak', keycloak_subject, id FROM users WHERE keycloak_subject IS NOT NULL")
            try db.drop(index: "users_by_keycloak_subject")
            try db.alter(table: "users") { t in t.drop(column: "keycloak_subject") }
            // Tokens and sign-ins under way say whose they are (the tables keep their first names).
            try db.alter(table: "keycloak_tokens") { t in t.add(column: "provider", .text).notNull().defaults(to: "keycloak") }
            try db.alter(table: "keycloak_sign_ins") { t in t.add(column: "provider", .text).notNull().defaults(to: "keycloak") }
        }
        migrator.registerMigration("v13: single-use sign-in credentials and sessions bound to a device key") { db in
            // ID tokens, nonces and DPoP proofs already used, by a hash of what identifies them, until they expire.
            try db.create(table: "spent_credentials") { t in
                t.primaryKey("key", .text)
                t.column("expires_at", .datetime).notNull().indexed()
            }
            // A DPoP-bound session: the RFC 7638 thumbprint of the app's key, and the hash of the separate token its
            // WebView's cookie holds (the app's own token is worthless without the key, so it must not be a cookie).
            try db.alter(table: "sessions") { t in
                t.add(column: "dpop_thumbprint", .text)
                t.add(column: "cookie_token_hash", .text)
            }
            try db.create(index: "sessions_by_cookie_token_hash", on: "sessions", columns: ["cookie_token_hash"], unique: true)
        }
        migrator.registerMigration("v14: answers kept under a client's Idempotency-Key") { db in
            // (caller, key) → the request's SHA-256 fingerprint; status, headers (JSON pairs) and body once it answered.
            try db.create(table: "idempotency_keys") { t in
                t.column("caller", .integer).notNull().references("users", onDelete: .cascade)
                t.column("key", .text).notNull()
                t.column("fingerprint", .text).notNull()
                t.column("status", .integer)
                t.column("headers", .text)
                t.column("body", .blob)
                t.column("started_at", .datetime).notNull()
                t.column("expires_at", .datetime).notNull().indexed()
                t.primaryKey(["caller", "key"])
            }
        }
        migrator.registerMigration("v15: accounts people own: names, confirmed addresses, mailed links, the mail outbox") { db in
            // Others see a name, never the address. Accounts from before get the part before `@`; those an operator
            // made had their address vouched for.
            try db.alter(table: "users") { t in
                t.add(column: "name", .text).notNull().defaults(to: "")
                t.add(column: "email_confirmed_at", .datetime)
            }
            try db.execute(sql: """
                UPDATE users SET name = CASE WHEN instr(email, '@') > 1 THEN substr(email, 1, instr(email, '@') - 1) ELSE 'Someone' END
                """)
            try db.execute(sql: "UPDATE users SET email_confirmed_at = created_at WHERE password_hash <> '!keycloak'")
            // Links mailed to confirm an address or reset a password: only a SHA-256 of each is kept.
            try db.create(table: "account_tokens") { t in
                t.primaryKey("token_hash", .text)
                t.column("user_id", .integer).notNull().indexed().references("users", onDelete: .cascade)
                t.column("purpose", .text).notNull()
                t.column("email", .text).notNull()
                t.column("created_at", .datetime).notNull()
                t.column("expires_at", .datetime).notNull().indexed()
                t.column("used_at", .datetime)
            }
            // Mail waits here, written in the transaction that caused it, until the SMTP server took it. No reference
            // to users: the mail that says an account is deleted outlives it.
            try db.create(table: "mail_outbox") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("message_id", .text).notNull().unique()
                t.column("recipient", .text).notNull()
                t.column("recipient_name", .text).notNull()
                t.column("subject", .text).notNull()
                t.column("text_body", .text).notNull()
                t.column("html_body", .text).notNull()
                t.column("attempts", .integer).notNull().defaults(to: 0)
                t.column("next_attempt_at", .datetime).notNull().indexed()
                t.column("claimed_until", .datetime)
                t.column("last_error", .text)
                t.column("created_at", .datetime).notNull()
            }
        }
        migrator.registerMigration("v16: posts' pictures, kept as variants re-encoded from their pixels") { db in
            try db.create(table: "pictures") { t in
                t.primaryKey("id", .text)
                t.column("post_id", .integer).notNull().unique().references("posts", onDelete: .cascade)
                t.column("alt", .text).notNull().defaults(to: "")
                t.column("width", .integer).notNull()
                t.column("height", .integer).notNull()
                t.column("thumbnail_width", .integer).notNull()
                t.column("thumbnail_height", .integer).notNull()
                t.column("created_at", .datetime).notNull()
            }
            try db.create(table: "picture_files") { t in
                t.column("picture_id", .text).notNull().references("pictures", onDelete: .cascade)
                t.column("variant", .text).notNull()
                t.column("encoding", .text).notNull()
                t.column("bytes", .blob).notNull()
                t.primaryKey(["picture_id", "variant", "encoding"])
            }
        }
        migrator.registerMigration("v17: live events kept in the store, numbered alike on every instance and across restarts") { db in
            try db.create(table: "live_streams") { t in
                t.primaryKey("stream", .text)
                t.column("latest", .integer).notNull()
            }
            try db.create(table: "live_events") { t in
                t.column("stream", .text).notNull()
                t.column("sequence", .integer).notNull()
                t.column("html", .text).notNull()
                t.column("appended_at", .datetime).notNull()
                t.primaryKey(["stream", "sequence"])
            }
        }
        migrator.registerMigration("v18: certificates from an ACME server, their account and open challenges, shared by instances") { db in
            try db.create(table: "acme_items") { t in
                t.primaryKey("name", .text)
                t.column("value", .blob).notNull()
                t.column("updated_at", .datetime).notNull()
            }
        }
        migrator.registerMigration("v19: user-generated content: terms accepted, roles, suspensions") { db in
            // An account accepted the terms in force when it last said yes (`terms_versions`); NULL: never.
            try db.alter(table: "users") { t in
                t.add(column: "terms_accepted_at", .datetime)
                t.add(column: "role", .text)
                t.add(column: "suspended_at", .datetime)
            }
            try db.create(table: "terms_versions") { t in
                t.primaryKey("version", .text)
                t.column("effective_at", .datetime).notNull()
            }
        }
        migrator.registerMigration("v20: reports of posts and people, each with a copy of what was reported") { db in
            // A report outlives what it names: the post may be edited or deleted, the people may leave.
            try db.create(table: "reports") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("reporter_id", .integer).references("users", onDelete: .setNull)
                t.column("post_id", .integer)
                t.column("user_id", .integer).indexed().references("users", onDelete: .setNull)
                t.column("reason", .text).notNull()
                t.column("comment", .text).notNull().defaults(to: "")
                t.column("kept_title", .text)
                t.column("kept_content", .text)
                t.column("kept_picture_alt", .text)
                t.column("status", .text).notNull().defaults(to: "open")
                t.column("created_at", .datetime).notNull()
                t.column("resolved_at", .datetime)
            }
            try db.create(index: "reports_by_status", on: "reports", columns: ["status", "created_at"])
            try db.create(index: "reports_by_reporter", on: "reports", columns: ["reporter_id", "created_at"])
        }
        migrator.registerMigration("v21: posts moderators removed or hold, and what moderators did") { db in
            // `hidden`: 'removed' by a moderator (restorable for 30 days) or 'held' for review; NULL: shown to all.
            try db.alter(table: "posts") { t in
                t.add(column: "hidden", .text)
                t.add(column: "hidden_at", .datetime)
            }
            // The audit log outlives the people in it.
            try db.create(table: "moderation_actions") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("moderator_id", .integer).references("users", onDelete: .setNull)
                t.column("moderator_name", .text).notNull()
                t.column("action", .text).notNull()
                t.column("report_id", .integer)
                t.column("post_id", .integer)
                t.column("user_id", .integer)
                t.column("target", .text).notNull()
                t.column("note", .text).notNull().defaults(to: "")
                t.column("created_at", .datetime).notNull().indexed()
            }
        }
        migrator.registerMigration("v22: people who block others, and accounts an operator vouched for") { db in
            // Made by an operator (`foyer user add`, the demo account): no new-account limit holds them.
            try db.alter(table: "users") { t in t.add(column: "vouched_at", .datetime) }
            try db.create(table: "blocks") { t in
                t.column("blocker_id", .integer).notNull().references("users", onDelete: .cascade)
                t.column("blocked_id", .integer).notNull().indexed().references("users", onDelete: .cascade)
                t.column("created_at", .datetime).notNull()
                t.primaryKey(["blocker_id", "blocked_id"])
            }
        }
        migrator.registerMigration("v23: whose words a live event carries, so a block keeps them from open pages") { db in
            try db.alter(table: "live_events") { t in t.add(column: "author_id", .integer) }
        }
        migrator.registerMigration("v24: the picture a report kept, as it was when reported") { db in
            try db.create(table: "report_pictures") { t in
                t.primaryKey("report_id", .integer).references("reports", onDelete: .cascade)
                t.column("content_type", .text).notNull()
                t.column("bytes", .blob).notNull()
            }
        }
        migrator.registerMigration("v25: a post's version, raised by each change its author makes") { db in
            try db.alter(table: "posts") { t in t.add(column: "version", .integer).notNull().defaults(to: 1) }
        }
        migrator.registerMigration("v26: each version of a post, for merging writes made from an older one") { db in
            try db.create(table: "post_versions") { t in
                t.column("post_id", .integer).notNull().references("posts", onDelete: .cascade)
                t.column("version", .integer).notNull()
                t.column("title", .text).notNull()
                t.column("content", .text).notNull()
                t.column("picture_id", .text)
                t.column("picture_alt", .text)
                t.column("created_at", .datetime).notNull()
                t.primaryKey(["post_id", "version"])
            }
            try db.execute(sql: PostVersionRows.backfill)
        }
        migrator.registerMigration("v27: which posts were deleted, so a write to one is told so (410) rather than 404") { db in
            try db.create(table: "deleted_posts") { t in
                t.primaryKey("id", .integer)
                t.column("deleted_at", .datetime).notNull()
            }
        }
        migrator.registerMigration("v28: passkeys, their accounts' WebAuthn user handles, and ceremonies' challenges") { db in
            try db.create(table: "passkey_users") { t in
                t.primaryKey("user_id", .integer).references("users", onDelete: .cascade)
                t.column("handle", .text).notNull().unique()
            }
            try db.create(table: "passkeys") { t in
                t.primaryKey("id", .text)
                t.column("user_id", .integer).notNull().indexed().references("users", onDelete: .cascade)
                t.column("name", .text).notNull()
                t.column("public_key", .text).notNull()
                t.column("sign_count", .integer).notNull()
                t.column("backup_eligible", .boolean).notNull()
                t.column("backed_up", .boolean).notNull()
                t.column("created_at", .datetime).notNull()
                t.column("last_used_at", .datetime)
            }
            try db.create(table: "passkey_challenges") { t in
                t.primaryKey("challenge", .text)
                t.column("ceremony", .text).notNull()
                t.column("user_id", .integer).references("users", onDelete: .cascade)
                t.column("expires_at", .datetime).notNull()
            }
        }
        migrator.registerMigration("v29: the language each account reads Foyer in") { db in
            try db.alter(table: "users") { t in t.add(column: "locale", .text) }
        }
        migrator.registerMigration("v30: the moderation log keeps what each action was on as names, said in each reader's language") { db in
            try db.alter(table: "moderation_actions") { t in
                t.add(column: "target_kind", .text)
                t.add(column: "target_title", .text)
                t.add(column: "target_name", .text)
            }
        }
        return migrator
    }
}

/// PostgreSQL's list starts with everything SQLite's v1 to v10 made; its own tables after that coordinate
/// instances (leases, large cluster messages) and have no SQLite twin; then twins of SQLite's later ones.
extension PostgresMigrations {
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
        ("4: GraphQL documents clients registered by hash (SQLite's v11)", [
            "CREATE TABLE graphql_documents (hash TEXT PRIMARY KEY, body TEXT NOT NULL, used_at TIMESTAMPTZ NOT NULL)",
            "CREATE INDEX graphql_documents_by_use ON graphql_documents (used_at)",
        ]),
        ("5: users of any identity provider (SQLite's v12)", [
            """
            CREATE TABLE user_identities (
                provider TEXT NOT NULL,
                subject TEXT NOT NULL,
                user_id BIGINT NOT NULL REFERENCES users ON DELETE CASCADE,
                PRIMARY KEY (provider, subject)
            )
            """,
            "CREATE INDEX user_identities_by_user ON user_identities (user_id)",
            "INSERT INTO user_identities (provider, subject, user_id) SELECT 'keycloak', keycloak_subject, id FROM users WHERE keycloak_subject IS NOT NULL",
            "ALTER TABLE users DROP COLUMN keycloak_subject",
            "ALTER TABLE keycloak_tokens ADD COLUMN provider TEXT NOT NULL DEFAULT 'keycloak'",
            "ALTER TABLE keycloak_sign_ins ADD COLUMN provider TEXT NOT NULL DEFAULT 'keycloak'",
        ]),
        ("6: single-use sign-in credentials and sessions bound to a device key (SQLite's v13)", [
            // Unlogged: a bound session spends a proof per request, and a commit that waited for the WAL to reach the disk
            // cost a millisecond each. A PostgreSQL crash (or a failover) empties the table: ID tokens older than
            // --oidc-id-token-max-age and proofs older than a minute are refused anyway, so that is all it forgets.
            "CREATE UNLOGGED TABLE spent_credentials (key TEXT PRIMARY KEY, expires_at TIMESTAMPTZ NOT NULL)",
            "CREATE INDEX spent_credentials_on_expires_at ON spent_credentials (expires_at)",
            "ALTER TABLE sessions ADD COLUMN dpop_thumbprint TEXT",
            "ALTER TABLE sessions ADD COLUMN cookie_token_hash TEXT",
            "CREATE UNIQUE INDEX sessions_by_cookie_token_hash ON sessions (cookie_token_hash)",
        ]),
        ("7: answers kept under a client's Idempotency-Key (SQLite's v14)", [
            """
            CREATE TABLE idempotency_keys (
                caller BIGINT NOT NULL REFERENCES users ON DELETE CASCADE,
                key TEXT NOT NULL,
                fingerprint TEXT NOT NULL,
                status INTEGER,
                headers TEXT,
                body BYTEA,
                started_at TIMESTAMPTZ NOT NULL,
                expires_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (caller, key)
            )
            """,
            "CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at)",
        ]),
        ("8: accounts people own: names, confirmed addresses, mailed links, the mail outbox (SQLite's v15)", [
            "ALTER TABLE users ADD COLUMN name TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE users ADD COLUMN email_confirmed_at TIMESTAMPTZ",
            "UPDATE users SET name = CASE WHEN position('@' in email) > 1 THEN split_part(email, '@', 1) ELSE 'Someone' END",
            "UPDATE users SET email_confirmed_at = created_at WHERE password_hash <> '!keycloak'",
            """
            CREATE TABLE account_tokens (
                token_hash TEXT PRIMARY KEY,
                user_id BIGINT NOT NULL REFERENCES users ON DELETE CASCADE,
                purpose TEXT NOT NULL,
                email TEXT NOT NULL,
                created_at TIMESTAMPTZ NOT NULL,
                expires_at TIMESTAMPTZ NOT NULL,
                used_at TIMESTAMPTZ
            )
            """,
            "CREATE INDEX account_tokens_by_user ON account_tokens (user_id)",
            "CREATE INDEX account_tokens_by_expiry ON account_tokens (expires_at)",
            """
            CREATE TABLE mail_outbox (
                id BIGSERIAL PRIMARY KEY,
                message_id TEXT NOT NULL UNIQUE,
                recipient TEXT NOT NULL,
                recipient_name TEXT NOT NULL,
                subject TEXT NOT NULL,
                text_body TEXT NOT NULL,
                html_body TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_at TIMESTAMPTZ NOT NULL,
                claimed_until TIMESTAMPTZ,
                last_error TEXT,
                created_at TIMESTAMPTZ NOT NULL
            )
            """,
            "CREATE INDEX mail_outbox_by_next_attempt ON mail_outbox (next_attempt_at)",
        ]),
        ("9: posts' pictures, kept as variants re-encoded from their pixels (SQLite's v16)", [
            """
            CREATE TABLE pictures (
                id TEXT PRIMARY KEY,
                post_id BIGINT NOT NULL UNIQUE REFERENCES posts ON DELETE CASCADE,
                alt TEXT NOT NULL DEFAULT '',
                width INTEGER NOT NULL,
                height INTEGER NOT NULL,
                thumbnail_width INTEGER NOT NULL,
                thumbnail_height INTEGER NOT NULL,
                created_at TIMESTAMPTZ NOT NULL
            )
            """,
            """
            CREATE TABLE picture_files (
                picture_id TEXT NOT NULL REFERENCES pictures ON DELETE CASCADE,
                variant TEXT NOT NULL,
                encoding TEXT NOT NULL,
                bytes BYTEA NOT NULL,
                PRIMARY KEY (picture_id, variant, encoding)
            )
            """,
        ]),
        ("10: live events kept in the store, numbered alike on every instance (SQLite's v17)", [
            "CREATE TABLE live_streams (stream TEXT PRIMARY KEY, latest BIGINT NOT NULL)",
            """
            CREATE TABLE live_events (
                stream TEXT NOT NULL,
                sequence BIGINT NOT NULL,
                html TEXT NOT NULL,
                appended_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (stream, sequence)
            )
            """,
        ]),
        ("11: certificates from an ACME server, their account and open challenges (SQLite's v18)", [
            "CREATE TABLE acme_items (name TEXT PRIMARY KEY, value BYTEA NOT NULL, updated_at TIMESTAMPTZ NOT NULL)",
        ]),
        ("12: user-generated content: terms accepted, roles, suspensions (SQLite's v19)", [
            "ALTER TABLE users ADD COLUMN terms_accepted_at TIMESTAMPTZ",
            "ALTER TABLE users ADD COLUMN role TEXT",
            "ALTER TABLE users ADD COLUMN suspended_at TIMESTAMPTZ",
            "CREATE TABLE terms_versions (version TEXT PRIMARY KEY, effective_at TIMESTAMPTZ NOT NULL)",
        ]),
        ("13: reports of posts and people, each with a copy of what was reported (SQLite's v20)", [
            """
            CREATE TABLE reports (
                id BIGSERIAL PRIMARY KEY,
                reporter_id BIGINT REFERENCES users ON DELETE SET NULL,
                post_id BIGINT,
                user_id BIGINT REFERENCES users ON DELETE SET NULL,
                reason TEXT NOT NULL,
                comment TEXT NOT NULL DEFAULT '',
                kept_title TEXT,
                kept_content TEXT,
                kept_picture_alt TEXT,
                status TEXT NOT NULL DEFAULT 'open',
                created_at TIMESTAMPTZ NOT NULL,
                resolved_at TIMESTAMPTZ
            )
            """,
            "CREATE INDEX reports_by_user ON reports (user_id)",
            "CREATE INDEX reports_by_status ON reports (status, created_at)",
            "CREATE INDEX reports_by_reporter ON reports (reporter_id, created_at)",
        ]),
        ("14: posts moderators removed or hold, and what moderators did (SQLite's v21)", [
            "ALTER TABLE posts ADD COLUMN hidden TEXT",
            "ALTER TABLE posts ADD COLUMN hidden_at TIMESTAMPTZ",
            """
            CREATE TABLE moderation_actions (
                id BIGSERIAL PRIMARY KEY,
                moderator_id BIGINT REFERENCES users ON DELETE SET NULL,
                moderator_name TEXT NOT NULL,
                action TEXT NOT NULL,
                report_id BIGINT,
                post_id BIGINT,
                user_id BIGINT,
                target TEXT NOT NULL,
                note TEXT NOT NULL DEFAULT '',
                created_at TIMESTAMPTZ NOT NULL
            )
            """,
            "CREATE INDEX moderation_actions_by_time ON moderation_actions (created_at)",
        ]),
        ("15: people who block others, and accounts an operator vouched for (SQLite's v22)", [
            "ALTER TABLE users ADD COLUMN vouched_at TIMESTAMPTZ",
            """
            CREATE TABLE blocks (
                blocker_id BIGINT NOT NULL REFERENCES users ON DELETE CASCADE,
                blocked_id BIGINT NOT NULL REFERENCES users ON DELETE CASCADE,
                created_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (blocker_id, blocked_id)
            )
            """,
            "CREATE INDEX blocks_by_blocked ON blocks (blocked_id)",
        ]),
        ("16: whose words a live event carries, so a block keeps them from open pages (SQLite's v23)", [
            "ALTER TABLE live_events ADD COLUMN author_id BIGINT",
        ]),
        ("17: the picture a report kept, as it was when reported (SQLite's v24)", [
            """
            CREATE TABLE report_pictures (
                report_id BIGINT PRIMARY KEY REFERENCES reports ON DELETE CASCADE,
                content_type TEXT NOT NULL,
                bytes BYTEA NOT NULL
            )
            """,
        ]),
        ("18: a post's version, raised by each change its author makes (SQLite's v25)", [
            "ALTER TABLE posts ADD COLUMN version INTEGER NOT NULL DEFAULT 1",
        ]),
        ("19: each version of a post, for merging writes made from an older one (SQLite's v26)", [
            """
            CREATE TABLE post_versions (
                post_id BIGINT NOT NULL REFERENCES posts ON DELETE CASCADE,
                version INTEGER NOT NULL,
                title TEXT NOT NULL,
                content TEXT NOT NULL,
                picture_id TEXT,
                picture_alt TEXT,
                created_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (post_id, version)
            )
            """,
            PostVersionRows.backfill,
        ]),
        ("20: which posts were deleted, so a write to one is told so (SQLite's v27)", [
            "CREATE TABLE deleted_posts (id BIGINT PRIMARY KEY, deleted_at TIMESTAMPTZ NOT NULL)",
        ]),
        ("21: passkeys, their accounts' WebAuthn user handles, and ceremonies' challenges (SQLite's v28)", [
            "CREATE TABLE passkey_users (user_id BIGINT PRIMARY KEY REFERENCES users ON DELETE CASCADE, handle TEXT NOT NULL UNIQUE)",
            """
            CREATE TABLE passkeys (
                id TEXT PRIMARY KEY,
                user_id BIGINT NOT NULL REFERENCES users ON DELETE CASCADE,
                name TEXT NOT NULL,
                public_key TEXT NOT NULL,
                sign_count BIGINT NOT NULL,
                backup_eligible BOOLEAN NOT NULL,
                backed_up BOOLEAN NOT NULL,
                created_at TIMESTAMPTZ NOT NULL,
                last_used_at TIMESTAMPTZ
            )
            """,
            "CREATE INDEX passkeys_user_id ON passkeys (user_id)",
            """
            CREATE TABLE passkey_challenges (
                challenge TEXT PRIMARY KEY,
                ceremony TEXT NOT NULL,
                user_id BIGINT REFERENCES users ON DELETE CASCADE,
                expires_at TIMESTAMPTZ NOT NULL
            )
            """,
        ]),
        ("22: the language each account reads Foyer in (SQLite's v29)", ["ALTER TABLE users ADD COLUMN locale TEXT"]),
        (
            "23: the moderation log keeps what each action was on as names (SQLite's v30)",
            ["ALTER TABLE moderation_actions ADD COLUMN target_kind TEXT, ADD COLUMN target_title TEXT, ADD COLUMN target_name TEXT"]
        ),
    ]
}
