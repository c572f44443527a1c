"""LangGraph state schemas (TypedDict or pydantic) as one stargraph state model."""

from __future__ import annotations

import operator
import typing
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, create_model

from stargraph import reducers
from stargraph.errors import CompileError
from stargraph.messages import MessagesState as NativeMessagesState

_LIST_ORIGINS = (list, tuple, typing.Sequence)


def is_typeddict(schema: Any) -> bool:
    """Whether ``schema`` is a ``TypedDict`` class."""
    return isinstance(schema, type) and hasattr(schema, "__total__") and issubclass(schema, dict)


def schema_fields(schema: Any) -> dict[str, Any]:
    """The annotated fields of a TypedDict or pydantic state schema, Annotated kept."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        out: dict[str, Any] = {}
        for name, info in schema.model_fields.items():
            ann = info.annotation
            out[name] = Annotated[(ann, *info.metadata)] if info.metadata else ann
        return out
    if is_typeddict(schema):
        try:
            return dict(get_type_hints(schema, include_extras=True))
        except NameError as exc:
            raise CompileError(
                f"the annotations of state schema {schema.__qualname__!r} cannot be resolved "
                f"({exc}); define the schema at module level, or drop "
                "`from __future__ import annotations` where it is defined in a function",
                subject="stargraph.langgraph.StateGraph",
            ) from exc
    raise CompileError(
        f"state schema {schema!r} is neither a TypedDict nor a pydantic model; "
        "declare the state as a TypedDict (or a pydantic BaseModel) as in LangGraph",
        subject="stargraph.langgraph.StateGraph",
    )


def _native_reducer(reducer: Any, base: Any) -> Any:
    # operator.add means "concatenate" on lists and "sum" on numbers; stargraph names both.
    if reducer is operator.add:
        origin = get_origin(base) or base
        return reducers.append if origin in _LIST_ORIGINS else reducers.add
    return reducer


def _field(ann: Any) -> tuple[Any, Any]:
    """(annotation, default) of one channel. As in LangGraph, a channel with a reducer
    starts at its type's empty value (``[]``, ``0``, ``{}``); one without starts unset,
    here ``None``."""
    if get_origin(ann) is Annotated:
        base, *meta = get_args(ann)
        meta = [_native_reducer(m, base) if callable(m) else m for m in meta]
        origin = get_origin(base) or base
        if origin in _LIST_ORIGINS:
            return Annotated[(base, *meta)], []
        try:
            return Annotated[(base, *meta)], origin()
        except Exception:
            return Annotated[(base | None, *meta)], None
    return ann | None, None


def build_state_model(name: str, module: str, schemas: list[Any]) -> type[BaseModel]:
    """One pydantic model whose fields are every channel the schemas declare (LangGraph
    makes a channel of every key of the state, input, output and node input schemas)."""
    fields: dict[str, Any] = {}
    for schema in schemas:
        for key, ann in schema_fields(schema).items():
            fields.setdefault(key, ann)
    base: type[BaseModel] = _Open
    messages = fields.get("messages")
    if messages is not None and reducers.add_messages in get_args(messages):
        base = NativeMessagesState
        del fields["messages"]
    spec = {key: _field(ann) for key, ann in fields.items()}
    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        name, __base__=base, __module__=module, **spec
    )
    return model


class _Open(BaseModel):
    """The base of a converted state: any Python value a node writes is kept as is."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
