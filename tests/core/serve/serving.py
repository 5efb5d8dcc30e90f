"""Helpers of the serve tests: the tiny tokenizer, the models' LLM, a server on a thread.

``build_byte_tokenizer`` is a byte-level BPE built with the ``tokenizers`` library
(printable ASCII, space and newline one token each, plus a few merges so that tokens span
several characters, and ChatML-style special tokens with a chat template), wrapped in
eagle-hal's ``Tokenizer``. ``start_server`` runs uvicorn on a background thread on a free
loopback port; the tests talk to it with the ``openai`` client (and ``httpx`` for what
that client cannot send).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

from eagle_hal.api import LLM
from eagle_hal.speculative.config import SpecConfig

MODEL = "tiny"
SPECIAL = ("<|im_start|>", "<|im_end|>")
MERGES = ("t h", "th e", "a n", "i n", "e r", "o n", "Ġ t", "Ġ a", "r e", "a t", "e n", "Ġ th")
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_byte_tokenizer():
    from eagle_hal.model.loading.tokenizer import Tokenizer
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    # printable ASCII, space and newline as ByteLevel spells them: a random model's output
    # is then readable text (every byte would give invalid UTF-8 most of the time)
    alphabet = [chr(b) for b in range(33, 127)] + ["\u0120", "\u010a"]
    vocab = {token: i for i, token in enumerate(alphabet)}
    for merge in MERGES:
        vocab.setdefault(merge.replace(" ", ""), len(vocab))
    pairs = [tuple(m.split(" ")) for m in MERGES]
    backend = Backend(models.BPE(vocab=vocab, merges=pairs))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    eos = backend.token_to_id("<|im_end|>")
    return Tokenizer(backend, eos_token_ids=(eos,), bos_token=None, eos_token="<|im_end|>",
                     chat_template=TEMPLATE)


CHAIN = SpecConfig(3, 1, 4)


def make_llm(backend, models, tokenizer, *, draft=True, spec=CHAIN, overlap=None, **kwargs):
    target, head = models
    kwargs.setdefault("max_context", 256)
    kwargs.setdefault("max_batch_size", 8)
    llm = LLM.from_models(backend, target, head if draft else None, tokenizer, spec, seed=0,
                          **kwargs)
    if overlap is not None:
        llm.worker.overlap = overlap
    return llm


@dataclasses.dataclass
class Running:
    server: Any
    llm: Any
    url: str
    api_key: str | None

    @property
    def loop(self):
        return self.server.loop

    def client(self, **kwargs):
        import openai

        kwargs.setdefault("api_key", self.api_key or "unused")
        return openai.OpenAI(base_url=f"{self.url}/v1", max_retries=0, timeout=60, **kwargs)

    def async_client(self, **kwargs):
        import openai

        kwargs.setdefault("api_key", self.api_key or "unused")
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", max_retries=0, timeout=60,
                                  **kwargs)

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Until every submitted request has finished on the engine thread."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.loop.outstanding == 0 and not self.llm.engine.has_unfinished():
                return
            time.sleep(0.01)
        raise AssertionError(f"{self.loop.outstanding} requests still outstanding")


@contextlib.contextmanager
def start_server(llm, **config):
    from eagle_hal.serve import ServeConfig, Server, create_app

    config.setdefault("model_names", (MODEL,))
    serve_config = ServeConfig(**config)
    server = Server(create_app(llm, serve_config), host="127.0.0.1", port=0).start()
    try:
        yield Running(server, llm, server.url, serve_config.api_key)
    finally:
        server.shutdown(timeout_s=30)
