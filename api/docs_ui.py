"""GET /api/docs: Swagger UI from the fastapi-offline package's files (Swagger UI 5, which reads the OpenAPI 3.1
FastAPI writes; 4.x shows "Unable to render this definition"), served by the API itself. FastAPI's default page
loads it from a CDN, which is a blank page on a machine (or a cluster) without internet."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

SWAGGER_UI = Path(fastapi_offline.__file__).parent / "static"
DOCS_URL = "/api/docs"
ASSETS = f"{DOCS_URL}/assets"


def install(app: FastAPI, openapi_url: str) -> None:
    app.mount(ASSETS, StaticFiles(directory=str(SWAGGER_UI)), name="swagger-ui")

    @app.get(DOCS_URL, include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
        )
