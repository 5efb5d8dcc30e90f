"""Running the application under uvicorn: in the foreground (``eagle-hal serve``, with
SIGTERM and SIGINT handled) or on a background thread (tests, benchmarks).

Shutdown: the signal (or ``shutdown()``) first tells the engine loop to take no new
requests and to give the running ones ``shutdown_grace_s`` to finish, after which they end
with an error event. Meanwhile the server keeps listening, so that new requests (and
``/health``) get a 503 a load balancer understands rather than a refused connection. Once
no request is outstanding, uvicorn stops accepting connections and waits for the open ones
to finish their responses; then the lifespan stops the engine thread.

An engine failure is permanent (the device state is unknown), so the server then stops as
well, and ``run()`` raises ``EngineFailed``: the process exits with a failure status for a
supervisor to restart it.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from typing import Any

import uvicorn

from eagle_hal.errors import EagleHalError
from eagle_hal.serve.engine_loop import EngineLoop

__all__ = ["EngineFailed", "Server", "bind"]


class EngineFailed(EagleHalError):
    """The engine failed while serving, and the server stopped."""

_GRACE_MARGIN_S = 5.0  # uvicorn's own deadline, past the engine loop's


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (``port`` 0: a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, draining before it exits (see the module docstring)."""

    def __init__(self, config: uvicorn.Config, loop: EngineLoop, grace_s: float) -> None:
        super().__init__(config)
        self._loop, self._grace_s = loop, grace_s
        self._drain_deadline: float | None = None  # set once the shutdown begins

    def drain(self) -> None:
        """Begin the shutdown (any thread): 503s until nothing is outstanding, then exit."""
        if self._drain_deadline is None:
            self._drain_deadline = time.monotonic() + self._grace_s + _GRACE_MARGIN_S
            self._loop.begin_shutdown(self._grace_s)

    def handle_exit(self, sig: int, frame: Any) -> None:
        # unlike uvicorn's, the signal is not recorded to be raised again once stopped: a
        # graceful shutdown on SIGTERM is a success (exit status 0). A second signal ends
        # the drain; a second SIGINT then forces the exit
        if self._drain_deadline is None:
            self.drain()
        elif self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True

    async def on_tick(self, counter: int) -> bool:
        # uvicorn's main loop calls this every 0.1 s
        deadline = self._drain_deadline
        if self._loop.failure is not None:
            self.should_exit = True
        elif deadline is not None and (self._loop.outstanding == 0
                                       or time.monotonic() >= deadline):
            self.should_exit = True
        return await super().on_tick(counter)


class Server:
    """``app`` (``create_app``'s) on ``host``:``port``. ``address`` is where it listens
    once started (the port chosen when 0 was asked)."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 8000,
                 log_level: str = "warning", access_log: bool = False) -> None:
        self.app = app
        self.loop: EngineLoop = app.state.engine_loop
        self.grace_s: float = app.state.config.shutdown_grace_s
        self.socket = bind(host, port)
        self.address: tuple[str, int] = self.socket.getsockname()[:2]
        config = uvicorn.Config(app, log_level=log_level, access_log=access_log,
                                timeout_graceful_shutdown=int(self.grace_s + _GRACE_MARGIN_S),
                                lifespan="on")
        self._server = _Uvicorn(config, self.loop, self.grace_s)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host if ':' not in host else f'[{host}]'}:{port}"

    def run(self) -> None:
        """Serve in the foreground until SIGTERM or SIGINT (``EngineFailed`` if the
        engine failed)."""
        self._server.run(sockets=[self.socket])
        if self.loop.failure is not None:
            failure = self.loop.failure
            raise EngineFailed(f"the engine failed ({type(failure).__name__}: {failure}); "
                               "the server stopped")

    @property
    def serving(self) -> bool:
        """Whether the background thread (``start``) still serves."""
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the background thread to end (a shutdown, or an engine failure)."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def start(self, timeout_s: float = 60.0) -> Server:
        """Serve on a background thread; returns once it accepts requests."""
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self.socket]},
                                        name="eagle-hal-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started and self._thread.is_alive() \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            raise RuntimeError("the server did not start")
        return self

    def shutdown(self, timeout_s: float | None = None) -> None:
        """As SIGTERM does: stop taking requests (503), let the running ones finish, stop."""
        self._server.drain()
        self.join(timeout_s if timeout_s is not None else self.grace_s + 2 * _GRACE_MARGIN_S)
