"""Reading request bodies: the endpoints read and check their bodies themselves (JSON, or
LibreTranslate's form fields), so that every error is {"error": "field: message"} with status 400.
`body_doc` documents such a body in the OpenAPI schema. The decoding fields of a body are those
`DecodeOptions` fields whose metadata names it (`with_options`), read back by `given_options`.
An endpoint takes its body, read and its API key checked, as a parameter `fields: JsonFields`
(a JSON object), `fields: FormFields` (JSON, form fields or query parameters) or `form:
MultipartFields` (a multipart body with its files); one that names a pair takes it validated,
with the model serving that pair, as `asked: Asked` from `served_pair(Body)`."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from pydantic import BaseModel, Field, ValidationError, create_model
from starlette.datastructures import FormData

from ...decode.options import OPTION_TYPES, DecodeOptions
from .service import HTTPError, ServedModel, ServiceDep

_OPTIONS = {f.name: f for f in dataclasses.fields(DecodeOptions)}


def body_doc(model: type[BaseModel], *types: str) -> dict[str, Any]:
    """OpenAPI text for a body the handler reads itself (a route's `openapi_extra`)."""
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {t: {"schema": schema} for t in types}}}


def with_options(name: str, body: type[BaseModel], key: str) -> type[BaseModel]:
    """The request model `name`: `body`'s fields, then each `DecodeOptions` field whose
    metadata[key] is true (`decode.options.option`), of its type (or None: the server's, unless
    its metadata gives a request_default), described by its help."""
    fields: dict[str, Any] = {}
    for field_name, f in _OPTIONS.items():
        if f.metadata[key]:
            kind = OPTION_TYPES[field_name]
            default = f.metadata["request_default"]
            given = kind if default is not None else kind | None
            fields[field_name] = (given, Field(default, description=f.metadata["help"]))
    return create_model(name, __base__=body, __doc__=body.__doc__, **fields)


def given_options(req: BaseModel) -> dict[str, Any]:
    """The decoding options a request gives (its `DecodeOptions` fields not None), as
    `DecodeOptions.replace` takes them."""
    given = {name: getattr(req, name) for name in type(req).model_fields if name in _OPTIONS}
    return {name: value for name, value in given.items() if value is not None}


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


async def _json_fields(request: Request, svc: ServiceDep) -> dict[str, Any]:
    """The JSON body's fields; 403 unless its api_key (or the Authorization header) is the key."""
    fields = await read_fields(request, form=False)
    svc.check_key(request, fields.get("api_key"))
    return fields


async def _form_fields(request: Request, svc: ServiceDep) -> dict[str, Any]:
    """The fields of a JSON or form body (`read_fields`); 403 as `_json_fields`."""
    fields = await read_fields(request, form=True)
    svc.check_key(request, fields.get("api_key"))
    return fields


async def _multipart(request: Request, svc: ServiceDep) -> FormData:
    """A multipart body, its uploaded files included; 403 as `_json_fields`."""
    form = await request.form()
    svc.check_key(request, form.get("api_key"))
    return form


JsonFields = Annotated[dict[str, Any], Depends(_json_fields)]
FormFields = Annotated[dict[str, Any], Depends(_form_fields)]
MultipartFields = Annotated[FormData, Depends(_multipart)]


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


@dataclass(frozen=True)
class Asked:
    """A request body validated, and the model serving the pair it names."""

    body: Any  # the request model's instance
    model: ServedModel


def served_pair(body: type[BaseModel], *, form: bool = False, libre: bool = False) -> Any:
    """The dependency `asked: Annotated[Asked, served_pair(Body)]`: the body read (403 unless
    the key), validated as `body` (400 naming the field, `validate`), then its source and
    target resolved (400 naming the pairs served, `Service.resolve`), in that order."""

    reader = Depends(_form_fields if form else _json_fields)  # FormFields or JsonFields

    async def dependency(svc: ServiceDep, fields: dict[str, Any] = reader) -> Asked:
        req = validate(body, fields, libre=libre)
        return Asked(req, svc.resolve(req.source, req.target))

    return Depends(dependency)


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


__all__ = [
    "Asked",
    "FormFields",
    "JsonFields",
    "body_doc",
    "first_error",
    "given_options",
    "read_fields",
    "served_pair",
    "validate",
    "with_options",
]
