"""The OpenAPI 3.1 document of ``stargraph serve``, made from its route table.

Each route's summary is its handler's docstring; a body it takes is described by the JSON
Schema of the model it is parsed into, so the document says what the server checks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

__all__ = ["document"]

_PARAM = re.compile(r"{(\w+)}")


def document(
    routes: Sequence[tuple[str, str, str, type[BaseModel] | None]], handlers: object
) -> dict[str, Any]:
    """The OpenAPI document of ``routes`` (method, path, handler name, body model), the
    handlers being the methods of ``handlers`` of those names."""
    from stargraph import __version__

    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {}
    for method, path, name, body in routes:
        doc = (getattr(handlers, name).__doc__ or name).strip()
        op: dict[str, Any] = {
            "operationId": f"{name}_{method.lower()}",
            "summary": doc.splitlines()[0],
            "description": doc,
            "parameters": [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                for p in _PARAM.findall(path)
            ],
            "responses": {
                "200": {"description": "OK"},
                "4XX": {
                    "description": "Refused: {'detail': what is wrong and how to fix it}",
                },
            },
        }
        if body is not None:
            schema = body.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(schema.pop("$defs", {}))
            schemas[body.__name__] = schema
            op["requestBody"] = {
                "required": method != "POST" or not path.endswith("/search"),
                "content": {
                    "application/json": {
                        "schema": {"$ref": f"#/components/schemas/{body.__name__}"}
                    }
                },
            }
        if path.endswith("/stream"):
            op["responses"]["200"] = {
                "description": "Server-sent events; each has an id to resume from (Last-Event-ID)",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }
        paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "stargraph serve",
            "version": __version__,
            "description": "Runs, threads, assistants and the store of stargraph graphs, as "
            "LangGraph Platform's API and the Agent Protocol define them.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
