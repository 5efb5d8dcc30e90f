"""``eagle-hal serve`` as a user runs it: flags refused before anything loads (exit status
2, one line), and the real command in a subprocess on a tiny model directory, answering the
``openai`` client with the key from the environment, then shutting down on SIGTERM while a
stream runs: new requests and ``/health`` get 503 while it drains, the stream finishes, the
process exits 0."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
from eagle_hal.cli import main
from safetensors.torch import save_file
from serving import MODEL


@pytest.mark.parametrize(("argv", "flag"), [
    (["--host", "0.0.0.0"], "--host"),
    (["--host", "192.168.1.4", "--port", "8000"], "--host"),
    (["--port", "70000"], "--port"),
    (["--limit-n", "0"], "--limit-n"),
    (["--max-waiting", "-1"], "--max-waiting"),
    (["--shutdown-timeout", "nan"], "--shutdown-timeout"),
])
def test_bad_flags_exit_2_before_loading(argv, flag, capsys, monkeypatch):
    monkeypatch.delenv("EAGLE_HAL_API_KEY", raising=False)
    assert main(["serve", "--device", "cpu", "--model", "/nonexistent", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err


def test_a_key_file_must_hold_a_key(tmp_path, capsys):
    empty = tmp_path / "key"
    empty.write_text("\n")
    for path in (empty, tmp_path / "missing"):
        assert main(["serve", "--model", "/nonexistent", "--api-key-file", str(path)]) == 2
        assert "--api-key-file" in capsys.readouterr().err


def test_without_the_serve_extra_one_line_names_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi raises ImportError
    assert main(["serve", "--model", "/nonexistent"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'pip install "eagle-hal[serve]"' in err


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, models, byte_tokenizer):
    """The tiny target as a Hugging Face directory, with the byte tokenizer."""
    from serving import TEMPLATE

    target, _ = models
    directory = tmp_path_factory.mktemp("tiny-serve")
    c = target.config
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim, "max_position_embeddings": c.max_position_embeddings,
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta,
        "eos_token_id": list(byte_tokenizer.eos_token_ids), "tie_word_embeddings": False,
        "hidden_act": "silu"}))
    save_file({k: v.detach().clone().contiguous() for k, v in target.state_dict().items()},
              str(directory / "model.safetensors"))
    (directory / "tokenizer.json").write_text(byte_tokenizer.backend.to_str())
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": TEMPLATE, "eos_token": "<|im_end|>"}))
    return directory


def test_serve_answers_with_the_key_and_shuts_down_on_sigterm(model_dir, tmp_path):
    env = {**os.environ, "EAGLE_HAL_API_KEY": "k-123", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "eagle_hal", "serve", "--device", "cpu", "--model",
         str(model_dir), "--draft", "none", "--port", "0", "--served-model-name", MODEL,
         "--max-context", "512", "--log-level", "warning"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    try:
        url = None
        lines = []
        for line in process.stderr:
            lines.append(line)
            found = re.search(r"at (http://127\.0\.0\.1:\d+)/v1", line)
            if found:
                url = found.group(1)
                break
        assert url, "".join(lines)
        threading.Thread(target=process.stderr.read, daemon=True).start()  # keep draining
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k-123", max_retries=0,
                               timeout=60)
        assert [m.id for m in client.models.list().data] == [MODEL]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="nope", max_retries=0).models.list()
        # long enough to still run while the checks below ask
        stream = client.completions.create(model=MODEL, prompt="the cat", max_tokens=480,
                                           temperature=0, stream=True,
                                           extra_body={"ignore_eos": True})
        chunks = iter(stream)
        first = next(chunks)
        process.send_signal(signal.SIGTERM)  # graceful: the running stream still finishes
        # while it drains, the server still listens and answers 503: /health (once the
        # signal has arrived), then a new request
        while (health := httpx.get(f"{url}/health", timeout=30)).status_code == 200:
            time.sleep(0.02)
        assert health.status_code == 503
        assert health.json()["error"]["code"] == "shutting_down"
        with pytest.raises(openai.APIStatusError) as refused:
            client.completions.create(model=MODEL, prompt="the cat", max_tokens=4)
        assert refused.value.status_code == 503
        rest = list(chunks)
        assert (rest or [first])[-1].choices[0].finish_reason == "length"
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_public_host_needs_a_key_or_the_explicit_flag(monkeypatch, tmp_path):
    from eagle_hal.cli import build_parser
    from eagle_hal.commands import serve
    from eagle_hal.errors import InvalidArgument
    from eagle_hal.serve.auth import is_loopback

    def config(*argv):
        return serve._config(build_parser("serve").parse_args(["serve", *argv]))

    monkeypatch.delenv("EAGLE_HAL_API_KEY", raising=False)
    assert config().api_key is None  # loopback: no key needed
    assert config("--host", "::1").api_key is None
    with pytest.raises(InvalidArgument):
        config("--host", "0.0.0.0")
    assert config("--host", "0.0.0.0", "--allow-unauthenticated").api_key is None
    key_file = tmp_path / "key"
    key_file.write_text("  from-file \nsecond line\n")
    assert config("--host", "0.0.0.0", "--api-key-file", str(key_file)).api_key == "from-file"
    monkeypatch.setenv("EAGLE_HAL_API_KEY", "from-env")
    made = config("--host", "10.0.0.2", "--public-metrics", "--limit-n", "3")
    assert made.api_key == "from-env" and made.public_metrics and made.limits.max_n == 3
    assert made.model_names == ("SmolLM2-135M-Instruct",)
    assert config("--model", "/m/Qwen3-1.7B-Q8_0.gguf").model_names == ("Qwen3-1.7B-Q8_0",)
    assert [is_loopback(h) for h in ("127.0.0.1", "127.8.0.1", "[::1]", "localhost",
                                     "0.0.0.0", "::", "192.168.0.1", "example.com")] == [
        True, True, True, True, False, False, False, False]
