"""Which head-less drafter a model with no shipped EAGLE head speculates with, per backend.

``LLM(draft="default")`` (and ``eagle-hal generate``'s default) loads the head shipped
for the model where one exists. Where none does, it drafts with what ``MEASURED`` names
for the backend: ``"ngram:N,K"`` (prompt lookup, ``speculative.ngram``), ``"self:L"``
(the target's first L layers, ``speculative.self_draft``), or ``None``: plain decoding.
A backend the table does not name decodes plainly: a drafter is named only where a
committed measurement shows it paying (``docs/benchmarks/README.md``, "Drafting without a
head"; the raw results under ``docs/benchmarks/cpu/drafters/``), and the load line says
which drafter was chosen and why.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MEASURED", "default_drafter", "describe_drafter", "drafter_name",
           "headless_drafter", "is_headless"]

# backend name -> the head-less drafter a committed measurement shows paying there
# (eagle-hal bench --modes plain,ngram:S3M3,self:S2L24 ...); none is committed yet
MEASURED: dict[str, str | None] = {}


def default_drafter(backend_name: str) -> str | None:
    """The head-less drafter ``MEASURED`` names for ``backend_name`` (``None``: none)."""
    return MEASURED.get(backend_name)


def is_headless(draft: Any) -> bool:
    """Whether a ``draft`` argument names a drafter that needs no EAGLE head
    (``ngram[:N,K]``, ``self:L``, ``model:PATH``)."""
    from eagle_hal.speculative.draft_model import is_draft_model
    from eagle_hal.speculative.ngram import is_ngram
    from eagle_hal.speculative.self_draft import is_self_draft

    return is_ngram(draft) or is_self_draft(draft) or is_draft_model(draft)


def headless_drafter(name: str, text: str) -> Any:
    """The drafter ``text`` names, or for ``model:PATH`` the path (loaded by the caller,
    once the target's tokenizer is checked): an ``NgramDrafter``, a ``SelfDrafter`` or a
    ``str``. Raises ``InvalidArgument`` naming ``name`` for a bad setting."""
    from eagle_hal.speculative.draft_model import is_draft_model, parse_draft_model
    from eagle_hal.speculative.ngram import NgramDrafter, is_ngram, parse_ngram
    from eagle_hal.speculative.self_draft import SelfDrafter, is_self_draft, parse_self_draft

    if is_ngram(text):
        return NgramDrafter(*parse_ngram(name, text))
    if is_self_draft(text):
        return SelfDrafter(parse_self_draft(name, text))
    if is_draft_model(text):
        return parse_draft_model(name, text)
    raise ValueError(f"{text!r} names no head-less drafter")


def describe_drafter(drafter: Any) -> str:
    """A head-less drafter for a status line."""
    from eagle_hal.speculative.ngram import NgramDrafter
    from eagle_hal.speculative.self_draft import SelfDrafter

    if isinstance(drafter, NgramDrafter):
        text = f"none, n-gram prompt lookup (N = {drafter.max_ngram}, K = {drafter.topk})"
    elif isinstance(drafter, SelfDrafter):
        layers = drafter.runner.target.config.num_layers if drafter.runner else "?"
        text = (f"none, self-drafting with the target's first {drafter.num_layers} of "
                f"{layers} layers")
    else:
        text = f"none, draft model {drafter.name.partition(':')[2] or drafter.name}"
    reason = getattr(drafter, "chosen_for", None)
    if reason:
        text += f" ({reason})"
    return text


def drafter_name(drafter: Any) -> str:
    """``ngram:N,K``, ``self:L`` or ``model:PATH``: how reports name a head-less drafter."""
    from eagle_hal.speculative.ngram import NgramDrafter

    if isinstance(drafter, NgramDrafter):
        return f"ngram:{drafter.max_ngram},{drafter.topk}"
    return str(drafter.name)
