"""``choir.notion.query``: query a Notion database through the Notion API.

The tool speaks the real API: ``POST /v1/databases/{id}/query`` with ``Authorization:
Bearer <token>`` (the secret ``notion_token``) and ``Notion-Version``, a ``title`` or
``rich_text`` ``contains`` filter and ``page_size``. Pages come back flattened to
``{id, url, properties: {name: plain value}}``. :class:`LocalNotionServer` is the example
fake: the same endpoint on 127.0.0.1 over in-memory databases, answering in Notion's shapes
(list objects, page objects, typed properties, its error objects).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final

from pydantic import ConfigDict, Field, JsonValue

from stargraph._typed import TypedModel
from stargraph.errors import ToolArgumentError, ToolError
from stargraph.plugin.hookspecs import hookimpl
from stargraph.tools._result import ToolOutput
from stargraph.tools._tool import PythonTool, ToolContext
from stargraph.tools.builtins._local import (
    HttpAnswer,
    HttpRequest,
    LocalHTTPServer,
    http_json,
    keyed_network_tool,
    required_secret,
)

__all__ = [
    "NOTION_ENDPOINT",
    "NOTION_VERSION",
    "LocalNotionServer",
    "NotionPlugin",
    "NotionQueryArgs",
    "notion_query_tool",
]

NOTION_ENDPOINT: Final = "https://api.notion.com"
"""The real Notion API (the default of :func:`notion_query_tool`)."""

NOTION_VERSION: Final = "2022-06-28"
"""The ``Notion-Version`` header the tool sends."""

_ID = r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"


class NotionQueryArgs(TypedModel):
    """Query a Notion database; optionally only pages whose property contains some text."""

    typed_error = ToolArgumentError

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_id: Annotated[
        str, Field(pattern=_ID, description="The database id (32 hex digits, dashes optional).")
    ]
    contains: Annotated[
        str | None,
        Field(min_length=1, max_length=200, description="Only pages whose property has this."),
    ] = None
    property: Annotated[
        str, Field(min_length=1, max_length=100, description="The property to filter on.")
    ] = "Name"
    page_size: Annotated[int, Field(ge=1, le=100, description="Pages to return.")] = 10


def notion_query_tool(endpoint: str = NOTION_ENDPOINT) -> PythonTool:
    """``choir.notion.query@1.0.0`` against the Notion-compatible ``endpoint``."""

    @keyed_network_tool("choir.notion.query@1.0.0", NotionQueryArgs, "notion_token")
    def notion_query(ctx: ToolContext, args: NotionQueryArgs) -> ToolOutput:
        """Query a Notion database; optionally only pages whose property contains a text."""
        token = required_secret(ctx, "notion_token")
        body: dict[str, Any] = {"page_size": args.page_size}
        if args.contains is not None:
            # Notion filters a title property with "title", any text property with
            # "rich_text"; the title one is the common case, and the fake honours both.
            kind = "title" if args.property == "Name" else "rich_text"
            body["filter"] = {"property": args.property, kind: {"contains": args.contains}}
        data = http_json(
            ctx,
            f"{endpoint}/v1/databases/{args.database_id}/query",
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Notion-Version": NOTION_VERSION},
            body=body,
            service="Notion",
        )
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise ToolError(f"tool {ctx.tool!r}: Notion answered without a results list")
        rows = [_flatten(ctx, page) for page in data["results"]]
        return ToolOutput(
            summary=f"{len(rows)} pages from database {args.database_id}",
            payload={"results": rows, "has_more": bool(data.get("has_more"))},
        )

    return notion_query


def _plain(prop: Any) -> JsonValue:
    """The plain value of one Notion property object."""
    if not isinstance(prop, dict):
        return None
    kind = prop.get("type")
    value = prop.get(kind) if isinstance(kind, str) else None
    if kind in ("title", "rich_text") and isinstance(value, list):
        return "".join(str(part.get("plain_text", "")) for part in value if isinstance(part, dict))
    if kind in ("select", "status") and isinstance(value, dict):
        return str(value.get("name", ""))
    if kind == "number" and (value is None or isinstance(value, int | float)):
        return value
    if kind == "checkbox" and isinstance(value, bool):
        return value
    return None  # a kind this flattening does not read (people, files, relations ...)


def _flatten(ctx: ToolContext, page: Any) -> dict[str, JsonValue]:
    if not isinstance(page, dict) or not isinstance(page.get("properties"), dict):
        raise ToolError(f"tool {ctx.tool!r}: Notion answered a result that is not a page")
    return {
        "id": str(page.get("id", "")),
        "url": str(page.get("url", "")),
        "properties": {name: _plain(prop) for name, prop in page["properties"].items()},
    }


class LocalNotionServer(LocalHTTPServer):
    """The Notion database query endpoint on 127.0.0.1, over in-memory databases.

    ``databases`` maps a database id to rows; a row maps property names to plain values:
    ``"Name"`` becomes the title, other strings ``rich_text``, numbers ``number``, booleans
    ``checkbox``. Requests need ``Authorization: Bearer <token>`` and a ``Notion-Version``.
    """

    def __init__(
        self, databases: Mapping[str, Sequence[Mapping[str, JsonValue]]], *, token: str
    ) -> None:
        super().__init__()
        self._token = token
        self._databases = {
            _canonical_id(db): [_page(db, i, row) for i, row in enumerate(rows)]
            for db, rows in databases.items()
        }

    def answer(self, request: HttpRequest) -> HttpAnswer:
        """Notion's query answer (or one of its error objects)."""
        parts = request.path.strip("/").split("/")
        if request.method != "POST" or len(parts) != 4 or parts[:2] != ["v1", "databases"]:
            return _notion_error(400, "invalid_request_url", "Invalid request URL.")
        if parts[3] != "query":
            return _notion_error(400, "invalid_request_url", "Invalid request URL.")
        if request.headers.get("authorization") != f"Bearer {self._token}":
            return _notion_error(401, "unauthorized", "API token is invalid.")
        if not request.headers.get("notion-version"):
            return _notion_error(400, "missing_version", "Notion-Version header is required.")
        pages = self._databases.get(_canonical_id(parts[2]))
        if pages is None:
            return _notion_error(404, "object_not_found", f"Could not find database {parts[2]}.")
        body = request.json() or {}
        if not isinstance(body, dict):
            return _notion_error(400, "validation_error", "body must be a JSON object")
        selected = [p for p in pages if _matches(p, body.get("filter"))]
        size = body.get("page_size", 100)
        if not isinstance(size, int) or not 1 <= size <= 100:
            return _notion_error(400, "validation_error", "page_size must be 1 to 100")
        return HttpAnswer.of_json(
            200,
            {
                "object": "list",
                "results": selected[:size],
                "next_cursor": selected[size]["id"] if len(selected) > size else None,
                "has_more": len(selected) > size,
                "type": "page_or_database",
            },
        )


def _canonical_id(text: str) -> str:
    return text.replace("-", "").lower()


def _page(database: str, index: int, row: Mapping[str, JsonValue]) -> dict[str, Any]:
    page_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"notion:{database}:{index}"))
    properties: dict[str, Any] = {}
    for name, value in row.items():
        if name == "Name":
            properties[name] = {"type": "title", "title": [_text(str(value))]}
        elif isinstance(value, bool):
            properties[name] = {"type": "checkbox", "checkbox": value}
        elif isinstance(value, int | float):
            properties[name] = {"type": "number", "number": value}
        else:
            properties[name] = {"type": "rich_text", "rich_text": [_text(str(value))]}
    return {
        "object": "page",
        "id": page_id,
        "url": f"https://www.notion.so/{page_id.replace('-', '')}",
        "properties": properties,
    }


def _text(content: str) -> dict[str, Any]:
    return {"type": "text", "text": {"content": content}, "plain_text": content}


def _matches(page: Mapping[str, Any], condition: Any) -> bool:
    if not isinstance(condition, dict):
        return True
    prop = page["properties"].get(condition.get("property"))
    for kind in ("title", "rich_text"):
        wanted = condition.get(kind)
        if isinstance(wanted, dict) and isinstance(wanted.get("contains"), str):
            if prop is None or prop.get("type") != kind:
                return False
            text = "".join(part["plain_text"] for part in prop[kind])
            return wanted["contains"].casefold() in text.casefold()
    return True


def _notion_error(status: int, code: str, message: str) -> HttpAnswer:
    return HttpAnswer.of_json(
        status, {"object": "error", "status": status, "code": code, "message": message}
    )


class NotionPlugin:
    """Example plugin: ``choir.notion.query`` against ``endpoint``."""

    def __init__(self, *, endpoint: str = NOTION_ENDPOINT) -> None:
        self.query = notion_query_tool(endpoint)

    @hookimpl
    def register_tools(self, register: Any) -> None:
        """Register the tool."""
        register(self.query)
