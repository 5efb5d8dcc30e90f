"""The Tokenizer wrapper: streaming decode, chat-template rendering, errors."""

from __future__ import annotations

import pytest
from eagle_hal.model.errors import ModelLoadError
from eagle_hal.model.loading.tokenizer import Tokenizer
from tokenizers import Tokenizer as Backend
from tokenizers import decoders, models, pre_tokenizers


def byte_tokenizer() -> Tokenizer:
    """Byte-level BPE without merges: every UTF-8 byte is its own token."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Backend(models.BPE({c: i for i, c in enumerate(alphabet)}, []))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return Tokenizer(backend, eos_token_ids=[0])


def metaspace_tokenizer() -> Tokenizer:
    """SentencePiece-style words whose decoder drops the leading space of a decode."""
    vocab = {"▁Hello": 0, "▁world": 1, "!": 2, "▁again": 3, "<unk>": 4}
    backend = Backend(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    return Tokenizer(backend)


@pytest.mark.parametrize(
    "text", ["plain ascii", "日本語 and émoji 🎉👍🏽", "a\u00e9\u4e2d\U0001f600z"]
)
def test_streaming_never_splits_a_character(text):
    """Byte tokens: deltas hold back partial UTF-8 and concatenate to the text."""
    tokenizer = byte_tokenizer()
    ids = tokenizer.encode(text)
    assert len(ids) == len(text.encode("utf-8"))
    decoder = tokenizer.incremental_decoder()
    deltas = [decoder.push(i) for i in ids]
    assert "".join(deltas) + decoder.flush() == text
    assert all("\ufffd" not in d for d in deltas)
    # exactly one non-empty delta per character: text appears as soon as it is complete
    assert [d for d in deltas if d] == list(text)


def test_streaming_keeps_spaces_of_sentencepiece_words():
    """Metaspace decoders strip a decode's leading space; the stream still has it."""
    tokenizer = metaspace_tokenizer()
    ids = [0, 1, 2, 3]
    decoder = tokenizer.incremental_decoder()
    streamed = "".join(decoder.push(i) for i in ids) + decoder.flush()
    assert streamed == tokenizer.decode(ids) == "Hello world! again"


def test_flush_emits_an_incomplete_tail():
    """A stream cut inside a character yields the replacement character on flush."""
    tokenizer = byte_tokenizer()
    ids = tokenizer.encode("é")[:1]
    decoder = tokenizer.incremental_decoder()
    assert decoder.push(ids[0]) == ""
    assert decoder.flush() == "\ufffd"


def test_chat_template_globals_and_filters():
    """Templates see bos/eos tokens, add_generation_prompt, a non-escaping tojson, and
    raise_exception surfaces as ModelLoadError."""
    template = (
        "{{ bos_token }}{% for m in messages %}"
        "{% if m['role'] not in ['user', 'assistant'] %}"
        "{{ raise_exception('bad role') }}{% endif %}"
        "{{ m['role'] }}: {{ m['content'] | tojson }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    tokenizer = Tokenizer(byte_tokenizer().backend, bos_token="<s>", chat_template=template)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "café <b>"}],
                                         tokenize=False)
    assert text == '<s>user: "café <b>"\nassistant:'
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "café <b>"}])
    assert tokenizer.decode(ids) == text
    assert tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                         add_generation_prompt=False) == '<s>user: "x"\n'
    with pytest.raises(ModelLoadError, match="bad role"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "x"}])


def test_missing_chat_template_is_an_error():
    """A model without a chat template says so instead of guessing one."""
    with pytest.raises(ModelLoadError, match="no chat template"):
        byte_tokenizer().apply_chat_template([{"role": "user", "content": "hi"}])


def test_sandbox_blocks_attribute_escape():
    """A hostile template cannot reach Python internals (jinja2 sandbox)."""
    from jinja2.exceptions import SecurityError

    tokenizer = Tokenizer(byte_tokenizer().backend,
                          chat_template="{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(SecurityError):
        tokenizer.apply_chat_template([])
