"""PostgreSQL connection strings in messages: where they point, never their password."""

from __future__ import annotations

import re

from stargraph.errors import CheckpointError

__all__ = ["describe_dsn", "redact"]


def redact(text: str, password: str | None = None) -> str:
    """``text`` with any password (URL userinfo, ``password=...``) replaced by ``***``."""
    text = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", text)
    text = re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", text, flags=re.IGNORECASE)
    if password:
        text = text.replace(password, "***")
    return text


def describe_dsn(dsn: str) -> tuple[str, str | None]:
    """``("host:port/dbname as user", password)`` for messages; raises ``CheckpointError``
    (without the password) for a string that is not a connection string."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        # libpq's reason quotes fragments of the string, which may be the password: say only
        # which host it seems to name.
        match = re.search(r"@\[?([^/?\[\]\s]+)", dsn) or re.search(r"host\s*=\s*(\S+)", dsn)
        host = f" for host {match.group(1)}" if match else ""
        raise CheckpointError(
            f"invalid PostgreSQL connection string{host}; "
            "use postgresql://user[:password]@host:port/dbname or 'host=... dbname=...'"
        ) from None
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or "5432")
    where = f"{host}:{port}/{params.get('dbname') or params.get('user') or ''}"
    if params.get("user"):
        where += f" as {params['user']}"
    password = params.get("password")
    return where, str(password) if password else None
