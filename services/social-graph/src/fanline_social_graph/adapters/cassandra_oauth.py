"""OAuth apps and authorization codes (``fanline_social_graph.ports``) in
social-graph's keyspace (``oauth_apps``, ``oauth_codes``; schema in
``cassandra.py``). A code is written with a TTL and taken with
``DELETE … IF EXISTS`` (an LWT), so exactly one of concurrent takers gets it.
"""

from __future__ import annotations

from cassandra.cluster import Session

from fanline_shared.cassandra import Repository, execute, execute_lwt, prepare, to_utc, truncate_ms

from ..ports import CodeGrant, OAuthApp


class CassandraOAuth(Repository):
    def _prepare(self, session: Session) -> None:
        ks = self._ks.name
        self._insert_app = prepare(
            session,
            f"INSERT INTO {ks}.oauth_apps (client_id, secret_hash, name, website, redirect_uris, scopes, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            write=True,
        )
        self._app = prepare(
            session,
            f"SELECT client_id, secret_hash, name, website, redirect_uris, scopes, created_at FROM {ks}.oauth_apps "
            "WHERE client_id = ?",
        )
        self._insert_code = prepare(
            session,
            f"INSERT INTO {ks}.oauth_codes (code_hash, client_id, username, redirect_uri, scopes, challenge, challenge_method) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?",
            write=True,
        )
        self._code = prepare(
            session,
            f"SELECT client_id, username, redirect_uri, scopes, challenge, challenge_method FROM {ks}.oauth_codes "
            "WHERE code_hash = ?",
        )
        self._take = prepare(session, f"DELETE FROM {ks}.oauth_codes WHERE code_hash = ? IF EXISTS", write=True, idempotent=False)

    async def create_app(self, app: OAuthApp) -> None:
        params = (
            app.client_id,
            app.secret_hash,
            app.name,
            app.website,
            "\n".join(app.redirect_uris),
            " ".join(app.scopes),
            truncate_ms(app.created_at),
        )
        await execute(self._session, self._insert_app, params, name="oauth_app_create")

    async def get_app(self, client_id: str) -> OAuthApp | None:
        rows = await execute(self._session, self._app, (client_id,), name="oauth_app_get")
        if not rows:
            return None
        r = rows[0]
        return OAuthApp(
            r.client_id,
            r.secret_hash,
            r.name,
            r.website,
            tuple(r.redirect_uris.split("\n")),
            tuple(r.scopes.split()),
            to_utc(r.created_at),
        )

    async def create_code(self, code_hash: str, grant: CodeGrant, ttl_s: int) -> None:
        params = (
            code_hash,
            grant.client_id,
            grant.username,
            grant.redirect_uri,
            " ".join(grant.scopes),
            grant.challenge,
            grant.challenge_method,
            max(1, ttl_s),
        )
        await execute(self._session, self._insert_code, params, name="oauth_code_create")

    async def take_code(self, code_hash: str) -> CodeGrant | None:
        rows = await execute(self._session, self._code, (code_hash,), name="oauth_code_get")
        if not rows:
            return None
        taken, _ = await execute_lwt(self._session, self._take, (code_hash,), name="oauth_code_take")
        if not taken:
            return None  # someone else exchanged it first (or it just expired)
        r = rows[0]
        return CodeGrant(r.client_id, r.username, r.redirect_uri, tuple(r.scopes.split()), r.challenge, r.challenge_method)
