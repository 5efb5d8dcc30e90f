"""The Triton softmax + top-k equals a float64 softmax and a brute-force stable sort.

Oracle: probabilities from ``torch.softmax(x.double(), -1)``; the order from a stable
descending sort of the logits themselves (softmax keeps their order; the sort keeps equal
logits in index order, which is the kernel's tie rule, and never sees an underflowed 0).
Without an accelerator the kernels run under TRITON_INTERPRET=1 on CPU tensors.
"""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")

from eagle_hal.ops.triton.topk_kernels import MAX_K, softmax_topk  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = torch.device("cpu") if INTERPRETED else torch.accelerator.current_accelerator()


def oracle(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(probs [n, k] float64, ids [n, k])``: the k largest, ties to the smaller id."""
    x = logits.double().cpu()
    ids = torch.sort(x, dim=-1, descending=True, stable=True).indices[:, :k]
    return torch.softmax(x, dim=-1).gather(-1, ids), ids


def assert_matches_oracle(logits: torch.Tensor, k: int) -> None:
    probs, ids = softmax_topk(logits, k)
    assert probs.dtype == torch.float32 and ids.dtype == torch.int64
    assert probs.shape == ids.shape == (logits.shape[0], k)
    expected_probs, expected_ids = oracle(logits, k)
    assert torch.equal(ids.cpu(), expected_ids)
    torch.testing.assert_close(probs.cpu().double(), expected_probs, rtol=1e-5, atol=1e-9)


def random_logits(rows: int, vocab: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(rows, vocab, generator=generator)
    return logits.to(device=DEVICE, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,vocab", [(1, 1000), (3, 4097), (17, 1000)])
@pytest.mark.parametrize("k", [1, 4, 10])
def test_random_logits_match_the_oracle(dtype, rows, vocab, k):
    """Random rows, a vocabulary that is not a multiple of the chunk; bfloat16 has ties."""
    assert_matches_oracle(random_logits(rows, vocab, dtype, seed=rows * vocab + k), k)


def test_full_draft_vocabulary():
    """The default draft vocabulary (49,152) in bfloat16, a tree's k."""
    assert_matches_oracle(random_logits(2, 49152, torch.bfloat16, seed=5), 8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_ties_go_to_the_smallest_index(dtype):
    """Equal maxima across chunks and within one: the smaller ids first, in order."""
    logits = random_logits(2, 5000, torch.float32, seed=1).clamp(max=5.0)
    positions = [4321, 17, 2048, 2047, 900]  # spread over chunks, out of order
    logits[0, positions] = 9.0
    logits[1, [3, 1, 2]] = 9.0  # one chunk
    logits[1, 4999] = 9.0  # the last, partial chunk
    logits = logits.to(dtype)
    assert_matches_oracle(logits, 6)
    _, ids = softmax_topk(logits, 6)
    assert ids[0, :5].tolist() == sorted(positions)
    assert ids[1, :4].tolist() == [1, 2, 3, 4999]


def test_negative_zero_ties_with_zero():
    """-0.0 and +0.0 are equal logits: ordered by index."""
    logits = torch.full((1, 64), -1.0)
    logits[0, 9], logits[0, 40] = 0.0, -0.0
    _, ids = softmax_topk(logits.to(DEVICE), 2)
    assert ids.tolist() == [[9, 40]]


def test_minus_infinity_entries():
    """Masked (-inf) logits get probability 0 and never displace a finite one."""
    logits = random_logits(3, 3000, torch.float32, seed=2)
    logits[:, ::3] = float("-inf")
    logits[1, :2048] = float("-inf")  # whole chunks of -inf
    assert_matches_oracle(logits, 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_all_but_a_few_minus_infinity(dtype):
    """Fewer finite logits than k: the rest are -inf ones (probability 0, smallest ids)."""
    logits = torch.full((2, 4097), float("-inf"))
    logits[0, [4096, 7, 2500]] = torch.tensor([1.0, 2.0, 0.5])
    logits[1, 3000] = -50.0
    logits = logits.to(device=DEVICE, dtype=dtype)
    assert_matches_oracle(logits, 5)
    probs, ids = softmax_topk(logits, 5)
    assert ids[0].tolist() == [7, 4096, 2500, 0, 1]
    assert probs[1].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_strided_rows_and_small_vocabulary():
    """Rows of a wider tensor (a column slice) and a vocabulary below one chunk."""
    wide = random_logits(4, 130, torch.float32, seed=3)
    assert_matches_oracle(wide[:, :97], 4)


@pytest.mark.parametrize("chunk", [16, 128])
def test_forced_chunks(chunk):
    """Many short chunks (a long merge) give the same answer; a bad chunk is refused."""
    logits = random_logits(3, 1000, torch.bfloat16, seed=chunk)
    logits[2, 500:] = float("-inf")
    probs, ids = softmax_topk(logits, 10, chunk=chunk)
    expected_probs, expected_ids = oracle(logits, 10)
    assert torch.equal(ids.cpu(), expected_ids)
    torch.testing.assert_close(probs.cpu().double(), expected_probs, rtol=1e-5, atol=1e-9)
    with pytest.raises(ValueError, match="power of two"):
        softmax_topk(logits, 10, chunk=100)


def test_leading_dimensions():
    """``[..., V]`` logits give ``[..., k]`` outputs, row by row as the flattened rows."""
    logits = random_logits(6, 300, torch.float32, seed=6)
    probs, ids = softmax_topk(logits.view(2, 3, 300), 4)
    expected_probs, expected_ids = oracle(logits, 4)
    assert torch.equal(ids.cpu(), expected_ids.view(2, 3, 4))
    torch.testing.assert_close(probs.cpu().double(), expected_probs.view(2, 3, 4), rtol=1e-5,
                               atol=1e-9)


def test_no_rows_and_bad_k():
    """n = 0 gives empty outputs; k outside [1, V] is refused; k > MAX_K still answers."""
    probs, ids = softmax_topk(torch.empty(0, 100, device=DEVICE), 3)
    assert probs.shape == ids.shape == (0, 3)
    logits = random_logits(2, 40, torch.float32, seed=4)
    for k in (0, 41):
        with pytest.raises(ValueError, match="k must be"):
            softmax_topk(logits, k)
    assert_matches_oracle(logits, MAX_K + 1)


@pytest.mark.gpu
@pytest.mark.skipif(INTERPRETED or not torch.accelerator.is_available(),
                    reason="needs an accelerator (compiled Triton)")
@pytest.mark.parametrize("rows", [1, 4, 16, 64])
@pytest.mark.parametrize("k", [1, 8, 16])
def test_real_shape_on_the_accelerator(rows, k):
    """[rows, 49152] bfloat16 logits, compiled, as the draft produces them."""
    assert_matches_oracle(random_logits(rows, 49152, torch.bfloat16, seed=rows + k), k)


@pytest.mark.gpu
@pytest.mark.skipif(INTERPRETED or not torch.accelerator.is_available(),
                    reason="needs an accelerator (compiled Triton)")
def test_captures_into_a_device_graph():
    """No host sync: the two launches capture into a graph whose replay on new logits
    gives the eager result."""
    module = torch.get_device_module(DEVICE)
    graph_class = getattr(module, f"{DEVICE.type.upper()}Graph", None)
    if graph_class is None or not hasattr(module, "graph"):
        pytest.skip(f"torch.{DEVICE.type} offers no graph capture")
    logits = random_logits(16, 49152, torch.bfloat16, seed=8)
    softmax_topk(logits, 8)  # compile outside the capture
    graph = graph_class()
    with module.graph(graph):
        probs, ids = softmax_topk(logits, 8)
    logits.copy_(random_logits(16, 49152, torch.bfloat16, seed=9))
    graph.replay()
    module.synchronize()
    expected_probs, expected_ids = softmax_topk(logits, 8)
    assert torch.equal(ids, expected_ids) and torch.equal(probs, expected_probs)
    assert_matches_oracle(logits, 8)
