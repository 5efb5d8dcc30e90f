"""What one server is configured with, apart from the model: names, auth, caps, queueing."""

from __future__ import annotations

import dataclasses

from eagle_hal.errors import InvalidArgument
from eagle_hal.serve.limits import RequestLimits
from eagle_hal.validation import check_float, check_int

__all__ = ["ServeConfig"]


@dataclasses.dataclass(frozen=True, slots=True)
class ServeConfig:
    """``model_names``: the names a request's ``model`` may give (the first is the one
    ``/v1/models`` lists first); ``api_key``: the bearer token every ``/v1`` request (and
    ``/metrics`` unless ``public_metrics``) must carry, ``None`` for none; ``max_waiting``:
    requests that may wait beyond the batch's slots before new ones get 429;
    ``shutdown_grace_s``: how long running requests may finish once shutdown begins."""

    model_names: tuple[str, ...] = ("eagle-hal",)
    api_key: str | None = None
    public_metrics: bool = False
    limits: RequestLimits = dataclasses.field(default_factory=RequestLimits)
    max_waiting: int = 256
    shutdown_grace_s: float = 30.0

    def __post_init__(self) -> None:
        names = tuple(self.model_names)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise InvalidArgument("--served-model-name", names, "one or more non-empty names")
        object.__setattr__(self, "model_names", names)
        check_int("--max-waiting", self.max_waiting)
        check_float("--shutdown-timeout", self.shutdown_grace_s, low=0.0)
