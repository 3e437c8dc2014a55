"""The API's error envelope: every 4xx/5xx answer under /api/ has the body
`{"error": {"code": ..., "message": ...}}`; other paths keep FastAPI's default answers."""
from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from grader.ids import ID_OUT_OF_RANGE

log = logging.getLogger(__name__)

ERROR_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
    507: "insufficient_storage",
}


class ErrorDetail(BaseModel):
    code: str = Field(description="stable machine-readable code, e.g. not_found, forbidden")
    message: str = Field(description="what went wrong, for a person")
    details: list[dict[str, Any]] | None = Field(None, description="per-field problems of a 422")


class ErrorBody(BaseModel):
    error: ErrorDetail


# Documented on every route (FastAPI adds 422 itself; its schema is overridden here).
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": ERROR_CODES[code]} for code in (401, 403, 404, 422)
}


class ApiError(HTTPException):
    """An HTTPException with an explicit error code (default: from the status)."""

    def __init__(self, status_code: int, message: str, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code, message, headers=headers)
        self.code = code or ERROR_CODES.get(status_code, "error")


def error_response(status_code: int, message: str, code: str | None = None,
                   details: list[dict[str, Any]] | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    error: dict[str, Any] = {"code": code or ERROR_CODES.get(status_code, "error"), "message": message}
    if details is not None:
        error["details"] = details
    return JSONResponse({"error": error}, status_code=status_code, headers=headers)


def names_no_row(exc: RequestValidationError) -> str | None:
    """Why the request names no row, when one of its ids is out of range (grader.ids.RowId): it
    is answered 404 like an id that is not there; None otherwise."""
    for error in exc.errors():
        if error.get("type") == ID_OUT_OF_RANGE:
            where = ".".join(str(part) for part in error.get("loc", ())[1:])
            return f"not found: {where} {error.get('msg', '')}"
    return None


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def install_error_handlers(app: FastAPI) -> None:
    """The API's error body on /api/ paths; other paths keep FastAPI's default answers."""

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if not _is_api(request):
            return await http_exception_handler(request, exc)
        return error_response(exc.status_code, str(exc.detail), getattr(exc, "code", None),
                              headers=getattr(exc, "headers", None))

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        unknown = names_no_row(exc)
        if unknown is not None:
            if _is_api(request):
                return error_response(404, unknown)
            return JSONResponse({"detail": unknown}, status_code=404)
        if not _is_api(request):
            return await request_validation_exception_handler(request, exc)
        details = [
            {"loc": [str(part) for part in e.get("loc", ())], "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        where = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in details)
        return error_response(422, f"invalid request ({where})", details=details)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        if not _is_api(request):
            return PlainTextResponse("Internal Server Error", status_code=500)
        return error_response(500, "internal error; it has been logged")

    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(Exception, on_unexpected)
