"""OAuth apps and authorization codes (``fanline_social_graph.ports``) in
social-graph's SQLite database; the tables are created by ``sqlite.py``'s
migrations. A code is taken with ``DELETE … RETURNING`` in one transaction:
exactly one taker gets it."""

from __future__ import annotations

import sqlite3

from fanline_shared.sqlite import SqliteDatabase, from_ms, now_ms, to_ms

from ..ports import CodeGrant, OAuthApp


class SqliteOAuth:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def create_app(self, app: OAuthApp) -> None:
        params = (
            app.client_id,
            app.secret_hash,
            app.name,
            app.website,
            "\n".join(app.redirect_uris),
            " ".join(app.scopes),
            to_ms(app.created_at),
        )
        await self.db.run(
            lambda conn: conn.execute(
                "INSERT INTO oauth_apps (client_id, secret_hash, name, website, redirect_uris, scopes, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                params,
            ),
            name="oauth_app_create",
        )

    async def get_app(self, client_id: str) -> OAuthApp | None:
        def read(conn: sqlite3.Connection) -> OAuthApp | None:
            row = conn.execute(
                "SELECT client_id, secret_hash, name, website, redirect_uris, scopes, created_at FROM oauth_apps "
                "WHERE client_id = ?",
                (client_id,),
            ).fetchone()
            if row is None:
                return None
            return OAuthApp(row[0], row[1], row[2], row[3], tuple(row[4].split("\n")), tuple(row[5].split()), from_ms(row[6]))

        return await self.db.run(read, name="oauth_app_get", write=False)

    async def create_code(self, code_hash: str, grant: CodeGrant, ttl_s: int) -> None:
        now = now_ms()
        params = (
            code_hash,
            grant.client_id,
            grant.username,
            grant.redirect_uri,
            " ".join(grant.scopes),
            grant.challenge,
            grant.challenge_method,
            now + ttl_s * 1000,
        )

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM oauth_codes WHERE expires_at <= ?", (now,))  # few rows: they live minutes
            conn.execute(
                "INSERT INTO oauth_codes (code_hash, client_id, username, redirect_uri, scopes, challenge, challenge_method, "
                "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                params,
            )

        await self.db.run(insert, name="oauth_code_create")

    async def take_code(self, code_hash: str) -> CodeGrant | None:
        now = now_ms()

        def take(conn: sqlite3.Connection) -> CodeGrant | None:
            row = conn.execute(
                "DELETE FROM oauth_codes WHERE code_hash = ? "
                "RETURNING client_id, username, redirect_uri, scopes, challenge, challenge_method, expires_at",
                (code_hash,),
            ).fetchone()
            if row is None or row[6] <= now:
                return None
            return CodeGrant(row[0], row[1], row[2], tuple(row[3].split()), row[4], row[5])

        return await self.db.run(take, name="oauth_code_take")
