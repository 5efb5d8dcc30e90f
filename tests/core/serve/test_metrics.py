"""``/metrics``: every documented family, and the counts of a few requests whose outcome
the test knows (the oracle is the requests it sent and what ``usage`` reported)."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from serving import MODEL, make_llm, start_server

FAMILIES = {
    "eagle_hal_requests": "counter", "eagle_hal_http_requests": "counter",
    "eagle_hal_prompt_tokens": "counter", "eagle_hal_generation_tokens": "counter",
    "eagle_hal_time_to_first_token_seconds": "histogram",
    "eagle_hal_inter_token_latency_seconds": "histogram",
    "eagle_hal_accept_length": "histogram", "eagle_hal_verify_passes": "counter",
    "eagle_hal_preemptions": "counter", "eagle_hal_requests_running": "gauge",
    "eagle_hal_requests_waiting": "gauge", "eagle_hal_requests_outstanding": "gauge",
    "eagle_hal_kv_pages_used": "gauge", "eagle_hal_kv_pages_free": "gauge",
    "eagle_hal_eager_iterations": "counter",
}


def scrape(url: str) -> dict:
    response = httpx.get(f"{url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}
    return families, samples


@pytest.fixture(scope="module")
def server(cpu_backend, models, byte_tokenizer):
    llm = make_llm(cpu_backend, models, byte_tokenizer)
    with start_server(llm, public_metrics=True, api_key="key") as running:
        yield running


def test_every_documented_family_is_there(server):
    families, _ = scrape(server.url)
    assert {name: families[name].type for name in FAMILIES} == FAMILIES
    from eagle_hal.serve import metrics

    for name in FAMILIES:  # and each is documented
        assert name[len("eagle_hal_"):] in metrics.__doc__


def test_counts_follow_the_requests(server):
    client = server.client()
    outs = [client.completions.create(model=MODEL, prompt=p, max_tokens=n, temperature=0,
                                      extra_body={"ignore_eos": True})
            for p, n in (("the cat", 9), ("a dog ran", 14), ("in", 5))]
    server.wait_idle()
    _, samples = scrape(server.url)
    assert samples[("eagle_hal_requests_total", (("finish_reason", "length"),))] == 3
    assert samples[("eagle_hal_generation_tokens_total", ())] == sum(
        o.usage.completion_tokens for o in outs) == 28
    assert samples[("eagle_hal_prompt_tokens_total", ())] == sum(
        o.usage.prompt_tokens for o in outs)
    assert samples[("eagle_hal_http_requests_total",
                    (("code", "200"), ("endpoint", "/v1/completions")))] == 3
    assert samples[("eagle_hal_time_to_first_token_seconds_count", ())] == 3
    # after the first token, every token is one inter-token observation
    assert samples[("eagle_hal_inter_token_latency_seconds_count", ())] == 28 - 3
    passes = samples[("eagle_hal_verify_passes_total", ())]
    assert 0 < passes < 28 - 3  # speculation: fewer target passes than tokens
    assert samples[("eagle_hal_accept_length_count", ())] == 3
    assert samples[("eagle_hal_accept_length_sum", ())] > 3  # mean accept length above 1
    assert samples[("eagle_hal_kv_pages_used", ())] == 0
    free = server.llm.runner.table.allocator.num_free_pages
    assert samples[("eagle_hal_kv_pages_free", ())] == free > 0
    assert samples[("eagle_hal_requests_running", ())] == 0


def test_batches_that_cannot_overlap_are_counted(cpu_backend, models, byte_tokenizer):
    """With overlap on, a request asking for logprobs or a penalty makes its batches run
    eagerly: counted; plain requests' batches are not."""
    llm = make_llm(cpu_backend, models, byte_tokenizer, overlap=True)
    with start_server(llm, public_metrics=True) as running:
        client = running.client()
        client.completions.create(model=MODEL, prompt="the cat", max_tokens=12,
                                  temperature=0, extra_body={"ignore_eos": True})
        running.wait_idle()
        _, samples = scrape(running.url)
        assert samples[("eagle_hal_eager_iterations_total", ())] == 0
        for extra in ({"logprobs": 1}, {"presence_penalty": 0.5}):
            client.completions.create(model=MODEL, prompt="the cat", max_tokens=12,
                                      temperature=0, extra_body={"ignore_eos": True, **extra})
        running.wait_idle()
        _, samples = scrape(running.url)
        verify = samples[("eagle_hal_verify_passes_total", ())]
        eager = samples[("eagle_hal_eager_iterations_total", ())]
        assert eager >= 2 and eager == llm.worker.forced_eager_iterations < verify
