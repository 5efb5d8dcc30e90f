"""The errors the server answers with, in OpenAI's shape.

Every failure a client can see is one JSON object::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "top_p",
               "code": "invalid_value"}}

``APIError`` carries the HTTP status with those four fields; ``from_invalid_argument``
turns the library's ``InvalidArgument`` (which names the parameter) into a 400 whose
``param`` is the request field the client spelled.
"""

from __future__ import annotations

from typing import Any

from eagle_hal.errors import InvalidArgument

__all__ = [
    "APIError",
    "bad_request",
    "error_body",
    "from_invalid_argument",
    "unsupported_parameter",
]

INVALID_REQUEST = "invalid_request_error"

# each status's error type where the caller names none
_TYPES = {
    400: INVALID_REQUEST,
    401: INVALID_REQUEST,
    404: INVALID_REQUEST,
    405: INVALID_REQUEST,
    413: INVALID_REQUEST,
    429: "rate_limit_error",
    500: "server_error",
    503: "service_unavailable",
}


class APIError(Exception):
    """A request the server refuses or cannot serve: ``status`` and the OpenAI error
    fields (``type`` defaults to the status's)."""

    def __init__(self, status: int, message: str, *, code: str | None = None,
                 param: str | None = None, type: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type or _TYPES.get(status, "server_error" if status >= 500 else
                                       INVALID_REQUEST)
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(param: str | None, message: str, code: str = "invalid_value") -> APIError:
    return APIError(400, message, code=code, param=param)


def unsupported_parameter(param: str, why: str = "") -> APIError:
    """A request field this server does not implement (or not with that value)."""
    detail = f": {why}" if why else ""
    return APIError(400, f"{param} is not supported by this server{detail}",
                    code="unsupported_parameter", param=param)


def from_invalid_argument(error: InvalidArgument, param: str | None = None) -> APIError:
    """A 400 for ``error``; ``param`` is the request's name of the field when the library
    names it otherwise (``max_new_tokens`` is the client's ``max_tokens``)."""
    name = param or error.name
    return APIError(400, f"{name}={error.value!r} is not valid: expected {error.allowed}",
                    code="invalid_value", param=name)
