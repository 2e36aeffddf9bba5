"""The API's own documentation pages: ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc),
served with their JavaScript and CSS from an installed package (``fastapi-offline``
bundles them), so they work where no CDN is reachable; and the OpenAPI document's
descriptions in Markdown rather than the docstrings' RST markup."""

from __future__ import annotations

import re
from importlib.resources import files
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from service.auth import require_admin, require_worker
from service.serving.route_table import api_routes

ASSETS_URL = "/docs-assets"
_RST_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)


def markdown(text: str) -> str:
    """``literal`` (RST, as the docstrings write it) as `literal` (Markdown)."""
    return _RST_LITERAL.sub(r"`\1`", text)


def _descriptions_as_markdown(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: markdown(v) if k in ("description", "summary") and isinstance(v, str)
                else _descriptions_as_markdown(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_descriptions_as_markdown(v) for v in node]
    return node


def install_docs(app: FastAPI) -> None:
    """Add the documentation routes and the Markdown OpenAPI to ``app`` (created with
    ``docs_url=None, redoc_url=None``)."""
    assets = files("fastapi_offline") / "static"
    app.mount(ASSETS_URL, StaticFiles(directory=str(assets)), name="docs-assets")

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            _document_errors(schema, app)
            app.openapi_schema = _descriptions_as_markdown(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png")

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} API",
                              redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
                              with_google_fonts=False)


_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}


def _document_errors(schema: dict[str, Any], app: FastAPI) -> None:
    """The error answers as the server gives them: every error body is ``ErrorBody``
    (FastAPI would describe 422 as its own ``HTTPValidationError``), routes behind a token
    answer 401 and 403 (and declare the bearer scheme), routes with a body 400 (malformed
    JSON), 408 and 413."""
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schemas.setdefault("ErrorBody", {
        "title": "ErrorBody", "type": "object", "required": ["error", "detail"],
        "properties": {"error": {"type": "string", "title": "Error"},
                       "detail": {"type": "string", "title": "Detail"}}})
    components.setdefault("securitySchemes", {})["bearer"] = {"type": "http",
                                                              "scheme": "bearer"}
    gated = {(route.path, method.lower()): (require_admin in deps)
             for route in api_routes(app.routes)
             for deps in [[d.dependency for d in route.dependencies]]
             if require_worker in deps or require_admin in deps
             for method in route.methods or ()}
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            if "422" in responses:
                responses["422"] = {"description": "invalid request", "content": _ERROR}
            if "requestBody" in operation:
                responses.setdefault("400", {"description": "malformed JSON",
                                             "content": _ERROR})
                responses.setdefault("408", {"description": "body not received in time",
                                             "content": _ERROR})
                responses.setdefault("413", {"description": "body too large",
                                             "content": _ERROR})
            admin = gated.get((path, method))
            if admin is not None:
                operation["security"] = [{"bearer": []}]
                responses.setdefault("401", {"description": "no bearer token",
                                             "content": _ERROR})
                responses.setdefault("403", {
                    "description": "a token that may not call this route"
                    + (" (the admin token is needed)" if admin else ""), "content": _ERROR})
