"""Fixtures of the serve tests: a tiny random model behind the real HTTP stack.

The models are ``near_bigram_target`` with ``matching_eagle1`` (a head that guesses well,
so speculation accepts long paths) over the vocabulary of ``serving.build_byte_tokenizer``,
in float32 on the CPU. The helpers (``serving.py``) are importable from the tests beside.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from eagle_hal import select_backend
from eagle_hal.testing.models import matching_eagle1, near_bigram_target

sys.path.insert(0, os.path.dirname(__file__))

from serving import build_byte_tokenizer  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models on a shared machine: intra-op threads only add contention (the server's
    threads and the clients' share the cores too)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def byte_tokenizer():
    return build_byte_tokenizer()


@pytest.fixture(scope="session")
def cpu_backend():
    return select_backend("cpu")


@pytest.fixture(scope="session")
def models(byte_tokenizer):
    """(target, head): the target's EOS is the tokenizer's."""
    vocab = byte_tokenizer.vocab_size
    target = near_bigram_target(seed=7, vocab=vocab, eos=byte_tokenizer.eos_token_ids)
    return target, matching_eagle1(target, noise=0.02)
