"""Serve the built dashboard (frontend/dist) at `/`.

The dashboard is a single-page app: its routes (/runs/12/logs, ...) exist only in the browser, so
any GET outside /api that matches no API route gets index.html, and files under dist are served as
they are. This hooks into the 404 handler rather than a catch-all route, so that the API keeps its
own answers (405 for a wrong method, JSON 404s under /api).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import FileResponse, HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

NOT_BUILT = """<!doctype html><title>rlplane</title>
<p>The rlplane dashboard is not built. Run <code>make up</code> (it builds it), or
<code>cd frontend && npm ci && npm run build</code>. The API is at <a href="/api/docs">/api/docs</a>.</p>"""


def default_directory() -> Path:
    return Path(__file__).resolve().parents[1] / "frontend" / "dist"


def _is_api(path: str) -> bool:
    return path.startswith("/api/") or path in ("/api", "/healthz", "/readyz")


def install(app: FastAPI, directory: Path) -> None:
    root = directory.resolve()

    async def not_found(request: Request, exc: StarletteHTTPException) -> Response:
        path = request.url.path
        if exc.status_code != 404 or request.method not in ("GET", "HEAD") or _is_api(path):
            return await http_exception_handler(request, exc)
        index = root / "index.html"
        if not index.is_file():
            return HTMLResponse(NOT_BUILT, status_code=404)
        wanted = (root / path.lstrip("/")).resolve()
        if path != "/" and wanted.is_file() and wanted.is_relative_to(root):
            # Vite names built assets by content hash, so they never change under one name.
            cache = "public, max-age=31536000, immutable" if wanted.is_relative_to(root / "assets") else "no-cache"
            return FileResponse(wanted, headers={"Cache-Control": cache})
        return FileResponse(index, headers={"Cache-Control": "no-cache"})

    app.add_exception_handler(StarletteHTTPException, not_found)
