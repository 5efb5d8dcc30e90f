"""The tokenizer: encode, decode, streaming decode, end-of-sequence ids and the chat template.

One ``Tokenizer`` wraps a ``tokenizers.Tokenizer`` however it was obtained:

* from a Hugging Face directory: ``tokenizer.json`` (read with ``tokenizers``); without one,
  transformers' ``AutoTokenizer`` converts what is there (e.g. a SentencePiece model).
  The chat template comes from ``chat_template.jinja`` or ``tokenizer_config.json``.
* from GGUF metadata: ``tokenizer.ggml.*`` of a GPT-2-style byte-level BPE (tokens, merges,
  token types, the pre-tokenizer name) rebuilt as a ``tokenizers`` BPE, or of the
  SentencePiece BPE of Gemma 3 and Phi-3 (``tokenizer.ggml.model`` ``llama`` in a
  ``gemma3`` / ``phi3`` file: tokens, token types and scores, no merges) rebuilt as the
  byte-fallback BPE Hugging Face converts it to;
  the chat template from ``tokenizer.chat_template``.

Chat templates are rendered with jinja2 in a sandbox, with the globals and filters
Hugging Face templates rely on (``raise_exception``, ``strftime_now``, a non-escaping
``tojson``).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eagle_hal.model.errors import (
    CorruptFileError,
    InvalidConfigError,
    ModelFileNotFound,
    ModelLoadError,
    UnsupportedModelError,
)

__all__ = ["IncrementalDecoder", "Tokenizer"]

# GGUF token types (llama.cpp's enum): which vocabulary entries are special.
_GGUF_CONTROL, _GGUF_USER_DEFINED = 3, 4
# Pre-tokenizer split patterns by GGUF ``tokenizer.ggml.pre`` name.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DIGIT_SPLIT_PRE = frozenset({"smollm", "starcoder", "refact", "codeshell", "command-r"})
_GPT2_PRE = frozenset({"default", "gpt-2", "gpt2"})


class Tokenizer:
    """Text <-> token ids for one model, plus its chat template and end-of-sequence ids."""

    def __init__(
        self,
        backend: Any,
        *,
        eos_token_ids: Sequence[int] = (),
        bos_token: str | None = None,
        eos_token: str | None = None,
        chat_template: str | None = None,
    ) -> None:
        self.backend = backend  # a tokenizers.Tokenizer
        self.eos_token_ids = tuple(dict.fromkeys(int(i) for i in eos_token_ids))
        self.bos_token, self.eos_token = bos_token, eos_token
        self.chat_template = chat_template

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_hf_dir(cls, directory: str | Path, eos_token_ids: Sequence[int] = ()) -> Tokenizer:
        """Read a Hugging Face model directory's tokenizer. ``eos_token_ids`` (e.g. from
        config.json) are merged with the tokenizer's and ``generation_config.json``'s."""
        directory = Path(directory)
        settings = _read_optional_json(directory / "tokenizer_config.json")
        if (directory / "tokenizer.json").is_file():
            backend = _tokenizer_json(directory / "tokenizer.json")
        else:
            backend = _converted_by_transformers(directory)
        bos, eos = _token_text(settings.get("bos_token")), _token_text(settings.get("eos_token"))
        ids = list(eos_token_ids)
        generation = directory / "generation_config.json"
        generation_eos = _read_optional_json(generation).get("eos_token_id")
        extra = generation_eos if isinstance(generation_eos, list) else (
            [] if generation_eos is None else [generation_eos]
        )
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in extra):
            raise InvalidConfigError(
                f"{generation}: eos_token_id must be a token id or a list of them, "
                f"got {generation_eos!r}"
            )
        ids += extra
        if eos is not None and backend.token_to_id(eos) is not None:
            ids.append(backend.token_to_id(eos))
        template_file = directory / "chat_template.jinja"
        template = (
            _read_text(template_file)
            if template_file.is_file()
            else _named_template(settings.get("chat_template"), directory)
        )
        return cls(backend, eos_token_ids=ids, bos_token=bos, eos_token=eos, chat_template=template)

    @classmethod
    def from_gguf(cls, reader: Any, source: str | None = None) -> Tokenizer:
        """Rebuild the tokenizer stored in a ``gguf.GGUFReader``'s metadata (``source``
        names the file in messages; the reader's own path by default). Raises
        ``UnsupportedModelError`` for tokenizer models other than GPT-2-style BPE and
        ``InvalidConfigError`` / ``CorruptFileError`` for missing, ill-typed or
        unreadable tokenizer metadata."""
        if source is None:
            source = str(getattr(getattr(reader, "data", None), "filename", None) or "GGUF file")
        metadata = _GGUFTokenizerFields(reader.fields, source)
        kind = metadata.value("tokenizer.ggml.model")
        architecture = metadata.value("general.architecture")
        sentencepiece = kind == "llama" and architecture in ("gemma3", "phi3")
        if kind != "gpt2" and not sentencepiece:
            raise UnsupportedModelError(
                f"GGUF tokenizer model {kind!r} of a {architecture!r} file is not supported "
                "(supported: byte-level BPE, 'gpt2', and the SentencePiece vocabularies of "
                "Gemma 3 and Phi-3); load the model from a Hugging Face directory instead"
            )
        tokens: list[str] = metadata.strings("tokenizer.ggml.tokens", required=True)
        merges: list[str] = metadata.strings("tokenizer.ggml.merges")
        if not all(" " in merge for merge in merges):
            raise metadata.bad("tokenizer.ggml.merges", "pairs of tokens separated by a space")
        token_types = metadata.value("tokenizer.ggml.token_type", [1] * len(tokens))
        if not isinstance(token_types, list) or not all(isinstance(t, int) for t in token_types):
            raise metadata.bad("tokenizer.ggml.token_type", "a list of integers")
        pre = metadata.value("tokenizer.ggml.pre", "default")
        if not isinstance(pre, str):
            raise metadata.bad("tokenizer.ggml.pre", "a string")
        try:
            if sentencepiece:
                unk_id = metadata.token_id("tokenizer.ggml.unknown_token_id", len(tokens))
                scores = None
                if architecture == "phi3":
                    scores = metadata.value("tokenizer.ggml.scores")
                    if not isinstance(scores, list) or len(scores) != len(tokens) or not all(
                        isinstance(x, int | float) for x in scores
                    ):
                        raise metadata.bad("tokenizer.ggml.scores", "a number per token")
                backend = _sentencepiece_bpe(tokens, token_types, unk_id, scores)
            else:
                backend = _byte_level_bpe(tokens, merges, token_types, pre)
        except ModelLoadError:
            raise
        except Exception as error:  # the tokenizers library raises plain Exceptions
            raise CorruptFileError(
                f"{source}: the tokenizer cannot be built from its metadata: {error}"
            ) from error
        bos_id = metadata.token_id("tokenizer.ggml.bos_token_id", len(tokens))
        eos_id = metadata.token_id("tokenizer.ggml.eos_token_id", len(tokens))
        bos = tokens[bos_id] if bos_id is not None else None
        if bos is not None and metadata.value("tokenizer.ggml.add_bos_token", False) is True:
            from tokenizers import processors

            backend.post_processor = processors.TemplateProcessing(
                single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 $B:1", special_tokens=[(bos, bos_id)]
            )
        eos_ids = [eos_id] if eos_id is not None else []
        eot_id = metadata.token_id("tokenizer.ggml.eot_token_id", len(tokens))
        if eot_id is not None:
            eos_ids.append(eot_id)
        template = metadata.value("tokenizer.chat_template")
        if template is not None and not isinstance(template, str):
            raise metadata.bad("tokenizer.chat_template", "a string")
        return cls(
            backend,
            eos_token_ids=eos_ids,
            bos_token=bos,
            eos_token=tokens[eos_id] if eos_id is not None else None,
            chat_template=template,
        )

    # -- text <-> ids ----------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` applies the model's BOS rule."""
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def incremental_decoder(self, skip_special_tokens: bool = False) -> IncrementalDecoder:
        """A streaming decoder: feed ids one at a time, get text as soon as it is complete."""
        return IncrementalDecoder(self, skip_special_tokens)

    # -- chat ------------------------------------------------------------------------------

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tokenize: bool = True,
        **extra: Any,
    ) -> list[int] | str:
        """Render ``messages`` (``{"role", "content"}`` dicts) with the model's chat template.

        Returns token ids (``tokenize=True``, as transformers does; the template already
        places any BOS, so no special tokens are added on top) or the rendered text.
        ``extra`` keyword arguments reach the template. Raises ``ModelLoadError`` when the
        model has no chat template or the template calls ``raise_exception``.
        """
        if not self.chat_template:
            raise ModelLoadError("this model has no chat template; pass plain prompts instead")
        text = _compiled_template(self.chat_template).render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
            **extra,
        )
        return self.encode(text, add_special_tokens=False) if tokenize else text


class IncrementalDecoder:
    """Turns a stream of token ids into text deltas.

    Text is held back while the decoded tail is an incomplete UTF-8 sequence (it decodes to
    U+FFFD) and emitted once complete. Each delta is the difference between decoding a
    short window with and without the new ids, so tokenizers that drop a leading space at
    the start of a decode still produce the right spacing.
    """

    _INCOMPLETE = "\ufffd"

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._window_start = 0  # first id of the decode window
        self._emitted_end = 0  # ids before this are fully emitted

    def push(self, token_id: int) -> str:
        """Add one id; return the newly completed text (possibly empty)."""
        self._ids.append(int(token_id))
        return self._emit(final=False)

    def flush(self) -> str:
        """Return whatever is still held back (an incomplete tail decodes as U+FFFD)."""
        return self._emit(final=True)

    def _emit(self, final: bool) -> str:
        decode = self._tokenizer.decode
        before = decode(self._ids[self._window_start : self._emitted_end], self._skip)
        after = decode(self._ids[self._window_start :], self._skip)
        if len(after) <= len(before) or (after.endswith(self._INCOMPLETE) and not final):
            return ""
        self._window_start, self._emitted_end = self._emitted_end, len(self._ids)
        return after[len(before) :]


# -- helpers ---------------------------------------------------------------------------------


def _read_optional_json(path: Path) -> dict[str, Any]:
    """A JSON object file, or ``{}`` when there is none; ``CorruptFileError`` (naming the
    file) when it is unreadable, not UTF-8, not JSON or not an object."""
    if not path.is_file():
        return {}
    from eagle_hal.model.loading.hf import read_json

    return read_json(path)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise CorruptFileError(f"{path} is not UTF-8 text: {error}") from error
    except OSError as error:
        raise CorruptFileError(f"{path} cannot be read: {error}") from error


def _tokenizer_json(path: Path) -> Any:
    from tokenizers import Tokenizer as Backend

    try:
        return Backend.from_file(str(path))
    except Exception as error:  # the tokenizers library raises plain Exceptions
        raise CorruptFileError(f"{path} is not a readable tokenizer.json: {error}") from error


def _token_text(token: Any) -> str | None:
    if isinstance(token, dict):
        content = token.get("content")
        return content if isinstance(content, str) else None
    return token if isinstance(token, str) else None


def _named_template(template: Any, directory: Path) -> str | None:
    """tokenizer_config's chat_template: a string, or a list of {name, template}."""
    if isinstance(template, list):
        if not all(isinstance(entry, dict) for entry in template):
            raise InvalidConfigError(
                f"{directory / 'tokenizer_config.json'}: chat_template must be a string or a "
                "list of {name, template} objects"
            )
        by_name = {entry.get("name"): entry.get("template") for entry in template}
        template = by_name.get("default") or next(iter(by_name.values()), None)
    if template is not None and not isinstance(template, str):
        raise InvalidConfigError(
            f"{directory / 'tokenizer_config.json'}: chat_template must be a string"
        )
    return template


class _GGUFTokenizerFields:
    """Typed reads of a GGUF reader's ``tokenizer.*`` fields, each failure naming the file."""

    def __init__(self, fields: Any, source: str) -> None:
        self.fields, self.source = fields, source

    def bad(self, key: str, wanted: str) -> InvalidConfigError:
        return InvalidConfigError(f"{self.source}: metadata {key!r} must be {wanted}")

    def value(self, key: str, default: Any = None) -> Any:
        field = self.fields.get(key)
        if field is None:
            return default
        try:
            return field.contents()
        except (UnicodeDecodeError, IndexError, ValueError, TypeError) as error:
            raise CorruptFileError(
                f"{self.source}: metadata {key!r} cannot be read: {error}"
            ) from error

    def strings(self, key: str, required: bool = False) -> list[str]:
        value = self.value(key)
        if value is None and not required:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.bad(key, "a list of strings")
        if required and not value:
            raise self.bad(key, "a non-empty list of strings")
        return value

    def token_id(self, key: str, vocab: int) -> int | None:
        value = self.value(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
            raise self.bad(key, f"a token id in [0, {vocab})")
        return value


def _converted_by_transformers(directory: Path) -> Any:
    if not directory.is_dir():
        raise ModelFileNotFound(f"tokenizer directory {directory} does not exist")
    try:
        from transformers import AutoTokenizer
    except ImportError as error:
        raise ModelFileNotFound(
            f"{directory} has no tokenizer.json; install transformers to convert its tokenizer "
            "(pip install 'eagle-hal[hf]')"
        ) from error
    try:
        converted = AutoTokenizer.from_pretrained(str(directory), use_fast=True)
    except (OSError, ValueError) as error:
        raise ModelFileNotFound(f"no usable tokenizer in {directory}: {error}") from error
    except Exception as error:  # converters fail on malformed files with any type
        raise CorruptFileError(
            f"the tokenizer files in {directory} cannot be read: {error}"
        ) from error
    return converted.backend_tokenizer


def _byte_level_bpe(tokens: list[str], merges: list[str], token_types: list[int], pre: str) -> Any:
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    vocab = {token: index for index, token in enumerate(tokens)}
    pairs = [tuple(merge.split(" ", 1)) for merge in merges]
    backend = Backend(models.BPE(vocab=vocab, merges=pairs, ignore_merges=pre == "llama-bpe"))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("llama-bpe", "llama3", "qwen2"):
        pattern = _QWEN2_SPLIT if pre == "qwen2" else _LLAMA3_SPLIT
        backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    elif pre in _DIGIT_SPLIT_PRE:
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    elif pre in _GPT2_PRE:
        backend.pre_tokenizer = byte_level
    else:
        raise UnsupportedModelError(
            f"GGUF pre-tokenizer {pre!r} is not supported; supported: "
            f"{', '.join(sorted(_GPT2_PRE | _DIGIT_SPLIT_PRE | {'llama-bpe', 'qwen2'}))}"
        )
    backend.decoder = decoders.ByteLevel()
    special = [
        AddedToken(token, special=True, normalized=False)
        for token, kind in zip(tokens, token_types, strict=False)
        if kind in (_GGUF_CONTROL, _GGUF_USER_DEFINED)
    ]
    backend.add_special_tokens(special)
    return backend


def _sentencepiece_bpe(
    tokens: list[str], token_types: list[int], unk_id: int | None,
    scores: list[float] | None = None,
) -> Any:
    """A SentencePiece BPE from a GGUF vocabulary, as transformers' GGUF conversion builds
    it: byte fallback, and merges (the file lists none) recovered from the vocabulary:
    every split of a token into two tokens, ordered by the merged token's rank, then longer
    left halves, then longer right halves. Control tokens are special; user-defined ones are
    added whole.

    ``scores`` ``None`` is Gemma's: the rank is the token's place in the file (Gemma's
    scores do not follow its merge order), spaces are normalised to U+2581, and whitespace
    tokens holding a space are stored as written but looked up as U+2581 runs. With
    ``scores`` (Phi-3's) the rank is the score, the text gets a U+2581 prefix and its
    spaces become U+2581, and decoding drops the one leading space that prefix makes."""
    from tokenizers import AddedToken, decoders, models, normalizers
    from tokenizers import Tokenizer as Backend

    gemma = scores is None
    spelled = (["\u2581" * len(t) if " " in t and not t.strip() else t for t in tokens]
               if gemma else list(tokens))
    vocab = {token: index for index, token in enumerate(spelled)}
    rank: dict[str, float] = (
        {token: -index for index, token in enumerate(spelled)} if gemma
        else dict(zip(spelled, scores, strict=True)))
    candidates: list[tuple[str, str, float]] = []
    for token, score in rank.items():
        pairs = [(token[:i], token[i:]) for i in range(1, len(token))
                 if token[:i] in vocab and token[i:] in vocab]
        pairs.sort(key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        candidates.extend((left, right, score) for left, right in pairs)
    candidates.sort(key=lambda c: (c[2], len(c[0]), len(c[1])), reverse=True)
    unk = tokens[unk_id] if unk_id is not None else None
    backend = Backend(models.BPE(vocab=vocab, merges=[(a, b) for a, b, _ in candidates],
                                 unk_token=unk, fuse_unk=True, byte_fallback=True))
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if gemma:
        backend.normalizer = normalizers.Replace(" ", "\u2581")
    else:
        backend.normalizer = normalizers.Sequence(
            [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        steps.append(decoders.Strip(" ", 1, 0))
    backend.decoder = decoders.Sequence(steps)
    backend.add_special_tokens([
        AddedToken(token, special=True, normalized=False)
        for token, kind in zip(tokens, token_types, strict=False) if kind == _GGUF_CONTROL
    ])
    backend.add_tokens([
        AddedToken(token, special=False, normalized=False)
        for token, kind in zip(tokens, token_types, strict=False)
        if kind == _GGUF_USER_DEFINED and token in vocab
    ])
    return backend


_TEMPLATE_CACHE: dict[str, Any] = {}


def _compiled_template(source: str) -> Any:
    if source not in _TEMPLATE_CACHE:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise ModelLoadError(f"chat template error: {message}")

        def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
                   separators: Any = None, sort_keys: bool = False) -> str:
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                              separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        _TEMPLATE_CACHE[source] = env.from_string(source)
    return _TEMPLATE_CACHE[source]
