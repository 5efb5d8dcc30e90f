"""``eagle-hal serve``: an OpenAI-compatible HTTP server over one ``LLM``.

Modules, one concept each: ``app`` (the FastAPI routes), ``engine_loop`` (the engine on its
own thread, fed by the handlers), ``protocol`` (request parsing and response shapes),
``sampling`` (a request body onto ``SamplingParams``), ``limits`` (per-request caps),
``auth`` (bearer tokens), ``metrics`` (Prometheus), ``errors`` (OpenAI's error shape),
``config`` and ``server`` (uvicorn, in the foreground or on a thread). Needs the ``serve``
extra: ``pip install "eagle-hal[serve]"``. See docs/serving.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["RequestLimits", "ServeConfig", "Server", "create_app"]

if TYPE_CHECKING:  # pragma: no cover
    from eagle_hal.serve.app import create_app
    from eagle_hal.serve.config import ServeConfig
    from eagle_hal.serve.limits import RequestLimits
    from eagle_hal.serve.server import Server


def __getattr__(name: str):  # fastapi and uvicorn load only when a server is built
    if name == "create_app":
        from eagle_hal.serve.app import create_app
        return create_app
    if name == "ServeConfig":
        from eagle_hal.serve.config import ServeConfig
        return ServeConfig
    if name == "RequestLimits":
        from eagle_hal.serve.limits import RequestLimits
        return RequestLimits
    if name == "Server":
        from eagle_hal.serve.server import Server
        return Server
    raise AttributeError(name)
