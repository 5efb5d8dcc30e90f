"""The FastAPI application: OpenAI's endpoints over one ``EngineLoop``.

``POST /v1/completions`` and ``POST /v1/chat/completions`` (JSON, or server-sent events with
``"stream": true``), ``GET /v1/models``, ``GET /health`` (no auth: for load balancers) and
``GET /metrics`` (Prometheus text). Every error has OpenAI's shape
(``serve.errors``). A handler parses and checks the body (``serve.parsing``), submits one
engine request per choice, and relays what the engine thread delivers; a client that goes
away cancels its choices, which frees their batch slots and KV pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from eagle_hal.serve.auth import authorized, cache_scope
from eagle_hal.serve.config import ServeConfig
from eagle_hal.serve.engine_loop import EngineLoop, Event, Job, Overloaded, ShuttingDown
from eagle_hal.serve.errors import APIError, bad_request, error_body
from eagle_hal.serve.metrics import CONTENT_TYPE, ServerMetrics
from eagle_hal.serve.parsing import ParsedRequest, parse_request
from eagle_hal.serve.protocol import (
    ChoiceResult,
    completion_chunk,
    completion_response,
    logprobs_object,
    new_id,
    token_logprobs,
    usage,
)

__all__ = ["create_app"]

_log = logging.getLogger(__name__)

_ENDPOINTS = ("/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics")


class _ServedModel:
    """What request parsing needs of the ``LLM``: encoding, and its check of a prompt's
    length against the context (the same check ``LLM.generate`` makes)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def encode(self, prompt: Any, *, chat: bool = False) -> list[int]:
        return self.llm.encode(prompt, chat=chat)

    def check_prompt(self, ids: list[int]) -> None:
        self.llm.check_prompt(ids)

    @property
    def vocab_size(self) -> int:
        return int(self.llm.target.config.vocab_size)


def create_app(llm: Any, config: ServeConfig, *, metrics: ServerMetrics | None = None,
               engine_loop: EngineLoop | None = None) -> FastAPI:
    """The application serving ``llm`` (an ``eagle_hal.LLM``); its engine loop starts and
    stops with the application's lifespan."""
    metrics = metrics or ServerMetrics()
    loop = engine_loop or EngineLoop(llm, max_waiting=config.max_waiting, metrics=metrics)
    model = _ServedModel(llm)
    max_context = llm.scheduler.config.max_context

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loop.start()
        try:
            yield
        finally:
            loop.stop()

    app = FastAPI(title="eagle-hal", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.engine_loop = loop
    app.state.metrics = metrics
    app.state.config = config
    app.state.llm = llm

    app.add_middleware(_CountResponses, metrics=metrics)

    @app.exception_handler(APIError)
    async def api_error(_: Request, error: APIError) -> JSONResponse:
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        message = {404: "no such endpoint", 405: "method not allowed"}.get(
            error.status_code, str(error.detail))
        return JSONResponse(error_body(message, "invalid_request_error", None,
                                       "not_found" if error.status_code == 404 else None),
                            status_code=error.status_code)

    @app.exception_handler(Exception)
    async def internal_error(_: Request, error: Exception) -> JSONResponse:
        # the details go to the log, not to a client (they may name paths and internals)
        _log.error("internal error", exc_info=error)
        return JSONResponse(error_body("internal error", "server_error", None,
                                       "internal_error"), status_code=500)

    def authorize(request: Request) -> None:
        if config.api_key is not None and not authorized(
            request.headers.get("authorization"), config.api_key
        ):
            raise APIError(401, "a valid API key is required: Authorization: Bearer KEY",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    @app.get("/health")
    async def health() -> JSONResponse:
        if loop.failure is not None:  # unauthenticated: no details (the log has them)
            raise APIError(503, "the engine failed", code="engine_failed")
        if loop.shutting_down or not loop.alive:
            raise APIError(503, "the server is shutting down", code="shutting_down")
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        if not config.public_metrics:
            authorize(request)
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    def model_card(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": started, "owned_by": "eagle-hal",
                "max_model_len": max_context}

    started = int(time.time())

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        authorize(request)
        return JSONResponse({"object": "list",
                             "data": [model_card(n) for n in config.model_names]})

    @app.get("/v1/models/{name:path}")
    async def one_model(name: str, request: Request) -> JSONResponse:
        authorize(request)
        if name not in config.model_names:
            raise APIError(404, f"the model {name!r} does not exist", code="model_not_found",
                           param="model")
        return JSONResponse(model_card(name))

    async def generate(request: Request, chat: bool) -> Response:
        received = time.perf_counter()  # time to first token counts from here
        authorize(request)
        body = await _read_json(request, config.limits.max_body_bytes)
        # parsing tokenizes every prompt: on a worker thread, so that a large body does not
        # stall the streams this event loop serves
        parsed = await asyncio.to_thread(
            parse_request, body, chat=chat, llm=model, model_names=config.model_names,
            max_context=max_context, limits=config.limits)
        queue: asyncio.Queue[Event] = asyncio.Queue()
        running = asyncio.get_running_loop()
        scope = cache_scope(request.headers.get("authorization"), config.api_key)
        jobs = [Job(parsed.prompts[c.prompt_index], c.params, queue, running, tag=c,
                    received=received, cache_scope=scope) for c in parsed.choices]
        try:
            loop.submit(jobs)
        except Overloaded as full:
            raise APIError(429, str(full), code="too_many_requests",
                           headers={"Retry-After": "1"}) from None
        except ShuttingDown as down:
            raise APIError(503, str(down), code="shutting_down" if loop.failure is None
                           else "engine_failed") from None
        if parsed.stream:
            return _CancellingStream(
                _stream(parsed, jobs, queue, loop, llm.tokenizer), loop, jobs,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return await _collect(request, parsed, jobs, queue, loop, llm.tokenizer)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(request, chat=True)

    return app


class _CancellingStream(StreamingResponse):
    """A stream that cancels its jobs however the response ends: also when the client
    went away before the body's generator ever started, which a ``finally`` inside the
    generator would not see."""

    def __init__(self, content: Any, loop: EngineLoop, jobs: list[Job], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._loop, self._jobs = loop, jobs

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._loop.cancel(self._jobs)


class _CountResponses:
    """Counts each response by endpoint and status (a plain ASGI middleware: it leaves
    the body, streams and disconnects alone)."""

    def __init__(self, app: Any, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        label = scope["path"] if scope["path"] in _ENDPOINTS else "other"

        async def counted(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.metrics.answered(label, message["status"])
            await send(message)

        await self.app(scope, receive, counted)


async def _read_json(request: Request, limit: int) -> Any:
    """The body parsed as JSON; 413 past ``limit`` bytes (read no further), 400 if not JSON."""
    declared = request.headers.get("content-length", "")
    too_large = APIError(413, f"the request body is larger than {limit} bytes "
                         "(--limit-body-bytes)", code="request_too_large")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(None, f"the request body is not valid JSON: {error}",
                          code="invalid_json") from None


def _decoder(tokenizer: Any) -> Any:
    def decode(token: int) -> str:
        return tokenizer.decode([token]) if tokenizer is not None else str(token)
    return decode


def _failure(loop: EngineLoop, message: str) -> APIError:
    """The error of a request the engine loop ended: the engine failed (500), or the
    server is shutting down (503)."""
    if loop.failure is None and loop.shutting_down:
        return APIError(503, message, code="shutting_down")
    return APIError(500, message, code="engine_error")


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _collect(request: Request, parsed: ParsedRequest, jobs: list[Job],
                   queue: asyncio.Queue[Event], loop: EngineLoop, tokenizer: Any) -> Response:
    """Wait for every choice; a client that disconnects meanwhile cancels them."""
    results: list[ChoiceResult] = []
    disconnect = asyncio.ensure_future(_wait_disconnect(request))
    decode = _decoder(tokenizer)
    try:
        while len(results) < len(jobs):
            get = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({get, disconnect}, return_when=asyncio.FIRST_COMPLETED)
            if get not in done:
                get.cancel()
                return Response(status_code=499)  # nobody reads it
            event = get.result()
            if event.error is not None:
                raise _failure(loop, event.error)
            if event.output is None:
                continue
            logprobs = None
            if parsed.logprobs is not None:
                logprobs = logprobs_object(token_logprobs(event.output), decode,
                                           chat=parsed.chat, top=parsed.logprobs.top)
            results.append(ChoiceResult(event.job.tag.index, event.output, logprobs))
    finally:
        disconnect.cancel()
        loop.cancel(jobs)
    return JSONResponse(completion_response(parsed, new_id(parsed.chat), results))


def _sse(payload: Any) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


async def _stream(parsed: ParsedRequest, jobs: list[Job], queue: asyncio.Queue[Event],
                  loop: EngineLoop, tokenizer: Any) -> AsyncIterator[str]:
    """The server-sent events of a streaming request (``_CancellingStream`` cancels what
    still runs once the response ends)."""
    response_id, created = new_id(parsed.chat), int(time.time())
    decode = _decoder(tokenizer)
    offsets = dict.fromkeys(range(len(jobs)), 0)
    generated = 0
    if parsed.chat:
        for job in jobs:
            yield _sse(completion_chunk(parsed, response_id, created, index=job.tag.index,
                                        text="", role=True))
    remaining = len(jobs)
    while remaining:
        event = await queue.get()
        index = event.job.tag.index
        if event.error is not None:
            error = _failure(loop, event.error)
            yield _sse(error.body())
            break
        if event.delta is not None:
            logprobs = None
            if parsed.logprobs is not None:
                entries = token_logprobs(event.delta)
                logprobs = logprobs_object(entries, decode, chat=parsed.chat,
                                           top=parsed.logprobs.top, offset=offsets[index])
                # each token's own text, as the whole response counts them: the delta's
                # text may hold some back (a stop string's prefix, incomplete UTF-8)
                offsets[index] += sum(len(decode(t)) for t, _, _ in entries or ())
            ids = event.delta.token_ids if parsed.return_token_ids else ()
            if event.delta.text or logprobs is not None or ids:
                yield _sse(completion_chunk(parsed, response_id, created, index=index,
                                            text=event.delta.text, logprobs=logprobs,
                                            token_ids=event.delta.token_ids))
            continue
        remaining -= 1
        assert event.output is not None
        generated += len(event.output.token_ids)
        yield _sse(completion_chunk(parsed, response_id, created, index=index,
                                    text=None if parsed.chat else "",
                                    reason=event.output.finish_reason))
    else:
        if parsed.include_usage:
            yield _sse(completion_chunk(parsed, response_id, created,
                                        usage_now=usage(parsed.prompt_tokens, generated)))
    yield "data: [DONE]\n\n"
