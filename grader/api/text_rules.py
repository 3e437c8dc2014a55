"""The rule on control characters (grader.control_chars) written into the OpenAPI description,
so that a client, and a fuzzer driven by the description, knows it: every string of a
parameter and of a request body that has no format or list of values of its own gets a
`pattern` that leaves control characters out (a body's text may hold tab and line breaks, a
parameter's none), beside a pattern of its own (`allOf`)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI

ONE_LINE = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
MULTI_LINE = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$"
Schema = dict[str, Any]


def _strings(schema: Any, components: Schema, seen: set[str]) -> Iterator[Schema]:
    """Every string schema within `schema`, following references into `components` once each."""
    if isinstance(schema, list):
        for item in schema:
            yield from _strings(item, components, seen)
        return
    if not isinstance(schema, dict):
        return
    ref = schema.get("$ref", "")
    if ref.startswith("#/components/schemas/") and ref not in seen:
        seen.add(ref)
        yield from _strings(components.get(ref.rsplit("/", 1)[1]), components, seen)
    if schema.get("type") == "string" and not {"format", "enum", "const"} & schema.keys():
        yield schema
    for key, value in schema.items():
        if key != "$ref" and isinstance(value, dict | list):
            yield from _strings(value, components, seen)


def _add_pattern(string: Schema, pattern: str) -> None:
    """`pattern` on a string schema, beside the one it may have (both must match); once (a
    component may be reached from several operations)."""
    if pattern == string.get("pattern") or {"pattern": pattern} in string.get("allOf", []):
        return
    if "pattern" in string:
        string["allOf"] = [*string.get("allOf", []), {"pattern": pattern}]
    else:
        string["pattern"] = pattern


def with_text_rules(document: Schema) -> Schema:
    """`document` (an OpenAPI description, changed in place) with the patterns added."""
    components = document.get("components", {}).get("schemas", {})
    for path in document.get("paths", {}).values():
        for operation in path.values():
            for parameter in operation.get("parameters", []):
                for string in _strings(parameter.get("schema"), components, set()):
                    _add_pattern(string, ONE_LINE)
            for media in operation.get("requestBody", {}).get("content", {}).values():
                for string in _strings(media.get("schema"), components, set()):
                    _add_pattern(string, MULTI_LINE)
    return document


def install_text_rules(app: FastAPI) -> None:
    """`app.openapi()` answers its description with the patterns."""
    build: Callable[[], Schema] = app.openapi

    def openapi() -> Schema:
        if app.openapi_schema is None:
            app.openapi_schema = with_text_rules(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
