"""One place that maps every domain exception to an HTTP status and API.md's error body."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from checkpoint.errors import CheckpointError
from coordinator.errors import CoordinatorError
from grouping.errors import GroupingError
from service.serving.route_table import api_routes

log = logging.getLogger("coxswain.api")

STATUS_BY_CODE = {
    "unknown_processor": 404,
    "processor_conflict": 409,
    "unknown_job_model_version": 404,
    "not_a_participant": 409,
    "fenced": 409,
    "incompatible_worker": 409,
    "not_leader": 503,
    "store_unavailable": 503,
    "lease_contended": 503,
    "lease_token_required": 401,
    "invalid_elasticity_factor": 422,
    "unsupported_grouper_configuration": 422,
    "invalid_checkpoint": 400,
    "unknown_task": 404,
    "unknown_partition": 404,
    "no_job_model": 404,
}


class ApiError(Exception):
    """An error raised by a route with an explicit code, status and sentence."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def error_response(status: int, code: str, detail: str) -> JSONResponse:
    """API.md's error body."""
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(ApiError)
    async def _api(_: Request, e: ApiError) -> JSONResponse:
        return error_response(e.status, e.code, e.detail)

    @app.exception_handler(CoordinatorError)
    async def _coordinator(_: Request, e: CoordinatorError) -> JSONResponse:
        return error_response(STATUS_BY_CODE.get(e.code, 400), e.code, str(e))

    @app.exception_handler(GroupingError)
    async def _grouping(_: Request, e: GroupingError) -> JSONResponse:
        return error_response(STATUS_BY_CODE.get(e.code, 422), e.code, str(e))

    @app.exception_handler(CheckpointError)
    async def _checkpoint(_: Request, e: CheckpointError) -> JSONResponse:
        return error_response(STATUS_BY_CODE.get(e.code, 400), e.code, str(e))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        if any(err.get("type") == "json_invalid" for err in errors):
            return error_response(400, "malformed_json", "the request body is not valid JSON")
        parts = []
        for err in errors[:5]:
            where = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            parts.append(f"{where or 'body'}: {err.get('msg')}")
        return error_response(422, "invalid_request", "; ".join(parts))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        response = error_response(e.status_code, code, str(e.detail))
        response.headers.update(e.headers or {})
        if e.status_code == 405:  # every method of the path (each is a route of its own)
            allowed = {m for route in api_routes(request.app.routes)
                       if route.matches(request.scope)[0] is not Match.NONE
                       for m in route.methods or ()}
            response.headers["allow"] = ", ".join(sorted(allowed))
        return response
