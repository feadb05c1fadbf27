-- Foyer's SQLite schema as its migrations (Storage/Migrations.swift) leave an empty database, written from them by
-- StorageTests: never edit it by hand. A new database is made from it; the migrations listed are recorded as applied.
-- migration: v1: users and sessions
-- migration: v2: posts
-- migration: v3: tasks of the embedded GraphQL task service
-- migration: v4: offline copies of task reads
-- migration: v5: Keycloak accounts and their tokens
-- migration: v6: Keycloak browser sign-ins under way
-- migration: v7: server secrets
-- migration: v8: sign-in failures
-- migration: v9: Keycloak session ids
-- migration: v10: push devices and their outbox
-- migration: v11: GraphQL documents clients registered by hash
-- migration: v12: users of any identity provider
-- migration: v13: single-use sign-in credentials and sessions bound to a device key
-- migration: v14: answers kept under a client's Idempotency-Key
-- migration: v15: accounts people own: names, confirmed addresses, mailed links, the mail outbox
-- migration: v16: posts' pictures, kept as variants re-encoded from their pixels
-- migration: v17: live events kept in the store, numbered alike on every instance and across restarts
-- migration: v18: certificates from an ACME server, their account and open challenges, shared by instances
-- migration: v19: user-generated content: terms accepted, roles, suspensions
-- migration: v20: reports of posts and people, each with a copy of what was reported
-- migration: v21: posts moderators removed or hold, and what moderators did
-- migration: v22: people who block others, and accounts an operator vouched for
-- migration: v23: whose words a live event carries, so a block keeps them from open pages
-- migration: v24: the picture a report kept, as it was when reported
-- migration: v25: a post's version, raised by each change its author makes
-- migration: v26: each version of a post, for merging writes made from an older one
-- migration: v27: which posts were deleted, so a write to one is told so (410) rather than 404
-- migration: v28: passkeys, their accounts' WebAuthn user handles, and ceremonies' challenges
-- migration: v29: the language each account reads Foyer in
-- migration: v30: the moderation log keeps what each action was on as names, said in each reader's language

CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
CREATE TABLE "users" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "email" TEXT NOT NULL UNIQUE COLLATE NOCASE, "password_hash" TEXT NOT NULL, "created_at" DATETIME NOT NULL, "name" TEXT NOT NULL DEFAULT '', "email_confirmed_at" DATETIME, "terms_accepted_at" DATETIME, "role" TEXT, "suspended_at" DATETIME, "vouched_at" DATETIME, "locale" TEXT);
CREATE TABLE "sessions" ("id" TEXT PRIMARY KEY NOT NULL, "user_id" INTEGER NOT NULL REFERENCES "users"("id") ON DELETE CASCADE, "token_hash" TEXT NOT NULL UNIQUE, "csrf_token" TEXT NOT NULL, "user_agent" TEXT, "ip_address" TEXT, "created_at" DATETIME NOT NULL, "last_seen_at" DATETIME NOT NULL, "revoked_at" DATETIME, "dpop_thumbprint" TEXT, "cookie_token_hash" TEXT);
CREATE INDEX "sessions_on_user_id" ON "sessions"("user_id");
CREATE TABLE "posts" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "title" TEXT NOT NULL, "content" TEXT NOT NULL DEFAULT '', "author_id" INTEGER NOT NULL REFERENCES "users"("id") ON DELETE CASCADE, "created_at" DATETIME NOT NULL, "updated_at" DATETIME NOT NULL, "hidden" TEXT, "hidden_at" DATETIME, "version" INTEGER NOT NULL DEFAULT 1);
CREATE INDEX "posts_on_author_id" ON "posts"("author_id");
CREATE INDEX "posts_by_newest" ON "posts"("created_at", "id");
CREATE TABLE "tasks" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "title" TEXT NOT NULL, "description" TEXT NOT NULL, "status" TEXT NOT NULL DEFAULT 'OPEN', "version" INTEGER NOT NULL DEFAULT 1);
CREATE TABLE "task_cache" ("user_id" INTEGER NOT NULL REFERENCES "users"("id") ON DELETE CASCADE, "key" TEXT NOT NULL, "body" BLOB NOT NULL, "cached_at" DATETIME NOT NULL, PRIMARY KEY ("user_id", "key"));
CREATE TABLE "keycloak_tokens" ("session_id" TEXT PRIMARY KEY NOT NULL REFERENCES "sessions"("id") ON DELETE CASCADE, "access_token" TEXT NOT NULL, "refresh_token" TEXT, "id_token" TEXT, "access_expires_at" DATETIME NOT NULL, "keycloak_session_id" TEXT, "provider" TEXT NOT NULL DEFAULT 'keycloak');
CREATE TABLE "keycloak_sign_ins" ("state" TEXT PRIMARY KEY NOT NULL, "code_verifier" TEXT NOT NULL, "nonce" TEXT NOT NULL, "redirect_uri" TEXT NOT NULL, "return_to" TEXT NOT NULL, "created_at" DATETIME NOT NULL, "provider" TEXT NOT NULL DEFAULT 'keycloak');
CREATE TABLE "server_secrets" ("name" TEXT PRIMARY KEY NOT NULL, "value" BLOB NOT NULL, "created_at" DATETIME NOT NULL);
CREATE TABLE "sign_in_failures" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "key" TEXT NOT NULL, "failed_at" DATETIME NOT NULL);
CREATE INDEX "sign_in_failures_on_failed_at" ON "sign_in_failures"("failed_at");
CREATE INDEX "sign_in_failures_by_key" ON "sign_in_failures"("key", "failed_at");
CREATE INDEX "keycloak_tokens_by_session_id" ON "keycloak_tokens"("keycloak_session_id");
CREATE TABLE "push_devices" ("token" TEXT PRIMARY KEY NOT NULL, "user_id" INTEGER NOT NULL REFERENCES "users"("id") ON DELETE CASCADE, "session_id" TEXT REFERENCES "sessions"("id") ON DELETE SET NULL, "platform" TEXT NOT NULL, "operating_system" TEXT, "os_version" TEXT, "categories" TEXT NOT NULL DEFAULT '[]', "state" TEXT NOT NULL, "created_at" DATETIME NOT NULL, "updated_at" DATETIME NOT NULL);
CREATE INDEX "push_devices_on_user_id" ON "push_devices"("user_id");
CREATE INDEX "push_devices_on_session_id" ON "push_devices"("session_id");
CREATE TABLE "push_outbox" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "operation" TEXT NOT NULL, "device_token" TEXT, "platform" TEXT, "old_device_token" TEXT, "body" BLOB, "attempts" INTEGER NOT NULL DEFAULT 0, "last_error" TEXT, "created_at" DATETIME NOT NULL);
CREATE INDEX "push_outbox_on_device_token" ON "push_outbox"("device_token");
CREATE TABLE "graphql_documents" ("hash" TEXT PRIMARY KEY NOT NULL, "body" TEXT NOT NULL, "used_at" DATETIME NOT NULL);
CREATE INDEX "graphql_documents_on_used_at" ON "graphql_documents"("used_at");
CREATE TABLE "user_identities" ("provider" TEXT NOT NULL, "subject" TEXT NOT NULL, "user_id" INTEGER NOT NULL REFERENCES "users"("id") ON DELETE CASCADE, PRIMARY KEY ("provider", "subject"));
CREATE INDEX "user_identities_on_user_id" ON "user_identities"("user_id");
CREATE TABLE "spent_credentials" ("key" TEXT PRIMARY KEY NOT NULL, "expires_at" DATETIME NOT NULL);
CREATE INDEX "spent_credentials_on_expires_at" ON "spent_credentials"("expires_at");
CREATE UNIQUE INDEX "sessions_by_cookie_token_hash" ON "sessions"("cookie_token_hash");
CREATE TABLE "idempotency_keys" ("caller" INTEGER NOT NULL REFERENCES "users"("id") ON DELETE CASCADE, "key" TEXT NOT NULL, "fingerprint" TEXT NOT NULL, "status" INTEGER, "headers" TEXT, "body" BLOB, "started_at" DATETIME NOT NULL, "expires_at" DATETIME NOT NULL, PRIMARY KEY ("caller", "key"));
CREATE INDEX "idempotency_keys_on_expires_at" ON "idempotency_keys"("expires_at");
CREATE TABLE "account_tokens" ("token_hash" TEXT PRIMARY KEY NOT NULL, "user_id" INTEGER NOT NULL REFERENCES "users"("id") ON DELETE CASCADE, "purpose" TEXT NOT NULL, "email" TEXT NOT NULL, "created_at" DATETIME NOT NULL, "expires_at" DATETIME NOT NULL, "used_at" DATETIME);
CREATE INDEX "account_tokens_on_user_id" ON "account_tokens"("user_id");
CREATE INDEX "account_tokens_on_expires_at" ON "account_tokens"("expires_at");
CREATE TABLE "mail_outbox" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "message_id" TEXT NOT NULL UNIQUE, "recipient" TEXT NOT NULL, "recipient_name" TEXT NOT NULL, "subject" TEXT NOT NULL, "text_body" TEXT NOT NULL, "html_body" TEXT NOT NULL, "attempts" INTEGER NOT NULL DEFAULT 0, "next_attempt_at" DATETIME NOT NULL, "claimed_until" DATETIME, "last_error" TEXT, "created_at" DATETIME NOT NULL);
CREATE INDEX "mail_outbox_on_next_attempt_at" ON "mail_outbox"("next_attempt_at");
CREATE TABLE "pictures" ("id" TEXT PRIMARY KEY NOT NULL, "post_id" INTEGER NOT NULL UNIQUE REFERENCES "posts"("id") ON DELETE CASCADE, "alt" TEXT NOT NULL DEFAULT '', "width" INTEGER NOT NULL, "height" INTEGER NOT NULL, "thumbnail_width" INTEGER NOT NULL, "thumbnail_height" INTEGER NOT NULL, "created_at" DATETIME NOT NULL);
CREATE TABLE "picture_files" ("picture_id" TEXT NOT NULL REFERENCES "pictures"("id") ON DELETE CASCADE, "variant" TEXT NOT NULL, "encoding" TEXT NOT NULL, "bytes" BLOB NOT NULL, PRIMARY KEY ("picture_id", "variant", "encoding"));
CREATE TABLE "live_streams" ("stream" TEXT PRIMARY KEY NOT NULL, "latest" INTEGER NOT NULL);
CREATE TABLE "live_events" ("stream" TEXT NOT NULL, "sequence" INTEGER NOT NULL, "html" TEXT NOT NULL, "appended_at" DATETIME NOT NULL, "author_id" INTEGER, PRIMARY KEY ("stream", "sequence"));
CREATE TABLE "acme_items" ("name" TEXT PRIMARY KEY NOT NULL, "value" BLOB NOT NULL, "updated_at" DATETIME NOT NULL);
CREATE TABLE "terms_versions" ("version" TEXT PRIMARY KEY NOT NULL, "effective_at" DATETIME NOT NULL);
CREATE TABLE "reports" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "reporter_id" INTEGER REFERENCES "users"("id") ON DELETE SET NULL, "post_id" INTEGER, "user_id" INTEGER REFERENCES "users"("id") ON DELETE SET NULL, "reason" TEXT NOT NULL, "comment" TEXT NOT NULL DEFAULT '', "kept_title" TEXT, "kept_content" TEXT, "kept_picture_alt" TEXT, "status" TEXT NOT NULL DEFAULT 'open', "created_at" DATETIME NOT NULL, "resolved_at" DATETIME);
CREATE INDEX "reports_on_user_id" ON "reports"("user_id");
CREATE INDEX "reports_by_status" ON "reports"("status", "created_at");
CREATE INDEX "reports_by_reporter" ON "reports"("reporter_id", "created_at");
CREATE TABLE "moderation_actions" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "moderator_id" INTEGER REFERENCES "users"("id") ON DELETE SET NULL, "moderator_name" TEXT NOT NULL, "action" TEXT NOT NULL, "report_id" INTEGER, "post_id" INTEGER, "user_id" INTEGER, "target" TEXT NOT NULL, "note" TEXT NOT NULL DEFAULT '', "created_at" DATETIME NOT NULL, "target_kind" TEXT, "target_title" TEXT, "target_name" TEXT);
CREATE INDEX "moderation_actions_on_created_at" ON "moderation_actions"("created_at");
CREATE TABLE "blocks" ("blocker_id" INTEGER NOT NULL REFERENCES "users"("id") ON DELETE CASCADE, "blocked_id" INTEGER NOT NULL REFERENCES "users"("id") ON DELETE CASCADE, "created_at" DATETIME NOT NULL, PRIMARY KEY ("blocker_id", "blocked_id"));
CREATE INDEX "blocks_on_blocked_id" ON "blocks"("blocked_id");
CREATE TABLE "report_pictures" ("report_id" INTEGER PRIMARY KEY REFERENCES "reports"("id") ON DELETE CASCADE, "content_type" TEXT NOT NULL, "bytes" BLOB NOT NULL);
CREATE TABLE "post_versions" ("post_id" INTEGER NOT NULL REFERENCES "posts"("id") ON DELETE CASCADE, "version" INTEGER NOT NULL, "title" TEXT NOT NULL, "content" TEXT NOT NULL, "picture_id" TEXT, "picture_alt" TEXT, "created_at" DATETIME NOT NULL, PRIMARY KEY ("post_id", "version"));
CREATE TABLE "deleted_posts" ("id" INTEGER PRIMARY KEY, "deleted_at" DATETIME NOT NULL);
CREATE TABLE "passkey_users" ("user_id" INTEGER PRIMARY KEY REFERENCES "users"("id") ON DELETE CASCADE, "handle" TEXT NOT NULL UNIQUE);
CREATE TABLE "passkeys" ("id" TEXT PRIMARY KEY NOT NULL, "user_id" INTEGER NOT NULL REFERENCES "users"("id") ON DELETE CASCADE, "name" TEXT NOT NULL, "public_key" TEXT NOT NULL, "sign_count" INTEGER NOT NULL, "backup_eligible" BOOLEAN NOT NULL, "backed_up" BOOLEAN NOT NULL, "created_at" DATETIME NOT NULL, "last_used_at" DATETIME);
CREATE INDEX "passkeys_on_user_id" ON "passkeys"("user_id");
CREATE TABLE "passkey_challenges" ("challenge" TEXT PRIMARY KEY NOT NULL, "ceremony" TEXT NOT NULL, "user_id" INTEGER REFERENCES "users"("id") ON DELETE CASCADE, "expires_at" DATETIME NOT NULL);
