"""KVStorage writes and moves against a dict-of-slots oracle; the device token table."""

from __future__ import annotations

import random

import pytest
import torch
from eagle_hal.engine.kv_cache import (
    DeviceTokenTable,
    KVStorage,
    PageAllocator,
    RequestTokenTable,
)
from eagle_hal.hal.kv_layout import KVLayout

NUM_SLOTS, HEADS, DIM, LAYERS = 64, 2, 3, 2


def make_storage(order: str) -> KVStorage:
    return KVStorage(num_layers=LAYERS, num_slots=NUM_SLOTS, num_kv_heads=HEADS, head_dim=DIM,
                     layout=KVLayout(order=order, page_size=4), dtype=torch.float32,
                     device="cpu")


def slot_view(storage: KVStorage, layer: int, slot: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One slot's [H, D] key and value, read the way the layout defines it."""
    if storage.layout.order == "NHD":
        return storage.k_buffer(layer)[slot], storage.v_buffer(layer)[slot]
    return storage.k_buffer(layer)[:, slot], storage.v_buffer(layer)[:, slot]


def check_against_oracle(storage: KVStorage, oracle: list[dict[int, tuple]]) -> None:
    zero = torch.zeros(HEADS, DIM)
    for layer in range(LAYERS):
        for slot in range(NUM_SLOTS):
            k, v = slot_view(storage, layer, slot)
            expected_k, expected_v = oracle[layer].get(slot, (zero, zero))
            assert torch.equal(k, expected_k) and torch.equal(v, expected_v), (layer, slot)


@pytest.mark.parametrize("order", ["NHD", "HND"])
def test_write_and_overlapping_moves_match_oracle(order: str) -> None:
    rng = random.Random(order)
    torch.manual_seed(0)
    storage = make_storage(order)
    assert storage.k_buffer(0).shape == ((NUM_SLOTS, HEADS, DIM) if order == "NHD"
                                         else (HEADS, NUM_SLOTS, DIM))
    oracle: list[dict[int, tuple]] = [{} for _ in range(LAYERS)]
    for _ in range(20):
        if rng.random() < 0.5:
            layer = rng.randrange(LAYERS)
            slots = rng.sample(range(NUM_SLOTS), rng.randint(1, 10))
            k, v = torch.randn(len(slots), HEADS, DIM), torch.randn(len(slots), HEADS, DIM)
            storage.write_kv(layer, torch.tensor(slots, dtype=torch.int32), k, v)
            for i, s in enumerate(slots):
                oracle[layer][s] = (k[i], v[i])
        else:
            # Overlapping ranges, shifted either way, as KV compaction produces them.
            length = rng.randint(1, 12)
            src_start = rng.randrange(NUM_SLOTS - length)
            dst_start = min(max(0, src_start + rng.randint(-5, 5)), NUM_SLOTS - length)
            src = list(range(src_start, src_start + length))
            dst = list(range(dst_start, dst_start + length))
            storage.move_kv(torch.tensor(src), torch.tensor(dst))
            for layer in range(LAYERS):
                before = dict(oracle[layer])
                zero = (torch.zeros(HEADS, DIM), torch.zeros(HEADS, DIM))
                for s, d in zip(src, dst, strict=True):
                    oracle[layer][d] = before.get(s, zero)
        check_against_oracle(storage, oracle)


def test_scattered_move_permutation() -> None:
    """A move whose destinations are a permutation of its sources (a cycle)."""
    storage = make_storage("NHD")
    k = torch.randn(4, HEADS, DIM)
    storage.write_kv(1, torch.tensor([10, 11, 12, 13]), k, -k)
    storage.move_kv(torch.tensor([10, 11, 12, 13]), torch.tensor([11, 12, 13, 10]))
    assert torch.equal(storage.k_buffer(1)[[11, 12, 13, 10]], k)
    assert torch.equal(storage.v_buffer(1)[[11, 12, 13, 10]], -k)


def test_write_rejects_wrong_shapes_and_page_mismatch() -> None:
    storage = make_storage("NHD")
    with pytest.raises(ValueError, match="k/v must be"):
        storage.write_kv(0, torch.tensor([1]), torch.zeros(1, 3, DIM), torch.zeros(1, 3, DIM))
    with pytest.raises(ValueError, match="page size"):
        KVStorage.for_allocator(PageAllocator(4, 8), num_layers=1, num_kv_heads=1, head_dim=1,
                                layout=KVLayout(page_size=4), dtype=torch.float32, device="cpu")
    with pytest.raises(ValueError, match="multiple of the page size"):
        KVStorage(num_layers=1, num_slots=6, num_kv_heads=1, head_dim=1,
                  layout=KVLayout(page_size=4), dtype=torch.float32, device="cpu")


@pytest.mark.parametrize("slot_dtype", ["int32", "int64"])
def test_device_table_follows_integer_table(slot_dtype: str) -> None:
    """After random reserve/truncate/release and sync, every live position's slot matches."""
    rng = random.Random(1)
    layout = KVLayout(page_size=4, slot_dtype=slot_dtype)
    table = RequestTokenTable(PageAllocator(num_pages=40, page_size=4), 4, 48)
    device_table = DeviceTokenTable(table, layout, "cpu")
    assert device_table.tensor.dtype == getattr(torch, slot_dtype)
    rows: list[int] = []
    for _ in range(60):
        action = rng.random()
        if action < 0.2 and table.can_add_request():
            rows.append(table.add_request())
        elif action < 0.6 and rows:
            row = rng.choice(rows)
            new_len = table.length(row) + rng.randint(0, 9)
            if table.can_reserve(row, new_len):
                table.reserve(row, new_len)
        elif action < 0.9 and rows:
            row = rng.choice(rows)
            table.truncate(row, rng.randint(0, table.length(row)))
        elif rows:
            row = rows.pop(rng.randrange(len(rows)))
            table.release(row)
        if rng.random() < 0.5:
            device_table.sync()
            for row in rows:
                n = table.length(row)
                pages = table.pages(row)
                expected = [pages[p // 4] * 4 + p % 4 for p in range(n)]
                assert device_table.tensor[row, :n].tolist() == expected
