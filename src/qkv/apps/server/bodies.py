"""Reading request bodies: the endpoints read and check their bodies themselves (JSON, or
LibreTranslate's form fields), so that every error is {"error": "field: message"} with status 400.
`body_doc` documents such a body in the OpenAPI schema."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ValidationError

from .service import HTTPError


def body_doc(model: type[BaseModel], *types: str) -> dict[str, Any]:
    """OpenAPI text for a body the handler reads itself (a route's `openapi_extra`)."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {t: {"schema": schema} for t in types}}}


async def read_fields(request: Request, form: bool = True) -> dict[str, Any]:
    """The request's fields: a JSON object, or (form=True) form fields and query parameters, a
    field given more than once as a list."""
    body = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if form and kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        data = await request.form()
        fields: dict[str, Any] = {}
        for source in (request.query_params, data):
            for key in source:
                values = [v for v in source.getlist(key) if isinstance(v, str)]
                fields[key] = values[0] if len(values) == 1 else values
        return fields
    if not body.strip() and form:
        return {key: request.query_params[key] for key in request.query_params}
    try:
        fields = json.loads(body)
    except RecursionError:
        raise HTTPError(400, "malformed JSON body: nested too deeply") from None
    except ValueError as e:  # also UnicodeDecodeError, and an integer of over 4300 digits
        raise HTTPError(400, f"malformed JSON body: {e}") from None
    if not isinstance(fields, dict):
        raise HTTPError(400, f"the body must be a JSON object, got {type(fields).__name__}")
    return fields


def validate(model: type[BaseModel], fields: dict[str, Any], libre: bool = False) -> Any:
    """The fields as a `model`; 400 naming the first field in error (libre: a missing one in
    LibreTranslate's words)."""
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        errors = e.errors()
        if libre and errors[0]["type"] == "missing":
            missing = errors[0]["loc"][0]
            raise HTTPError(400, f"Invalid request: missing {missing} parameter") from None
        raise HTTPError(400, first_error(errors)) from None


def first_error(errors: Any) -> str:
    """'field: message' of the first pydantic error (the body's own name left out)."""
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    # a union (str | list[str]) reports each member; name the field once
    loc = [part for part in loc if part not in ("str", "list[str]")]
    where = ".".join(loc) or "body"
    message = first.get("msg", "invalid")
    if first.get("type") == "missing":
        message = "missing"
    elif first.get("type") == "extra_forbidden":
        message = "unknown field"
    return f"{where}: {message}"


__all__ = ["body_doc", "first_error", "read_fields", "validate"]
