"""The dashboards' HTML pages: each page's ``/* base.css */`` is the stylesheet both share
(server/static/base.css), so the worker's dashboard and the router's fleet panel keep one look
from one file."""

from __future__ import annotations

from importlib import resources

_MARK = "/* base.css */"


def page(package: str, name: str) -> str:
    """``static/<name>`` of ``package``, the shared stylesheet in place of its marker."""
    html = resources.files(package).joinpath(f"static/{name}").read_text(encoding="utf-8")
    css = resources.files("ctxcache.server").joinpath("static/base.css").read_text(encoding="utf-8")
    return html.replace(_MARK, css, 1)
