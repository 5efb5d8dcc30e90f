"""Running the application under uvicorn: in the foreground (``eagle-hal serve``, with
SIGTERM and SIGINT handled) or on a background thread (tests, benchmarks).

Shutdown: the signal (or ``shutdown()``) first tells the engine loop to take no new
requests (503) and to give the running ones ``shutdown_grace_s`` to finish, after which
they end with an error event; uvicorn stops accepting connections and waits for the open
ones a little longer than that, so that no request is left hanging. Then the lifespan
stops the engine thread.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from typing import Any

import uvicorn

from eagle_hal.serve.engine_loop import EngineLoop

__all__ = ["Server", "bind"]

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
    def __init__(self, config: uvicorn.Config, on_exit: Any) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: Any) -> None:
        # as uvicorn's, without recording the signal to raise again once stopped: a
        # graceful shutdown on SIGTERM is a success (exit status 0); a second SIGINT
        # forces the exit
        self._on_exit()
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


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
        self._server = _Uvicorn(config, self._begin_shutdown)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host if ':' not in host else f'[{host}]'}:{port}"

    def _begin_shutdown(self) -> None:
        self.loop.begin_shutdown(self.grace_s)

    def run(self) -> None:
        """Serve in the foreground until SIGTERM or SIGINT."""
        self._server.run(sockets=[self.socket])

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
        """As SIGTERM does: stop taking requests, let the running ones finish, stop."""
        self._begin_shutdown()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s if timeout_s is not None
                              else self.grace_s + 2 * _GRACE_MARGIN_S)
