# Diagnosis of the chain-loop graph on CUDA (lease B): the conformance check under several
# batch sequences, real CUDA graphs vs the CPU emulation, Triton vs reference attention.
import dataclasses, sys, time
import torch
from eagle_hal.registry import select_backend
from eagle_hal.testing.graphs import EmulatedGraphCapture
import eagle_hal.conformance.checks.check_graphs as cg
base = select_backend("cuda:0", backend="cuda")
Cls = type(base)
def make(emulate=False, torch_kernels=False, ref_attn=False):
    class B(Cls):
        @property
        def capabilities(self):
            c = super().capabilities
            return dataclasses.replace(c, triton=False) if torch_kernels else c
        def create_attention_backend(self, config):
            if ref_attn:
                from eagle_hal.ops.attention_reference import TorchAttentionBackend
                return TorchAttentionBackend(config)
            return super().create_attention_backend(config)
        def graph_capture(self):
            return EmulatedGraphCapture() if emulate else super().graph_capture()
    b = B.__new__(B); b.__dict__.update(base.__dict__); return b
def run(label, sizes, **kw):
    cg.BATCH_SIZES = sizes
    try:
        cg.test_chain_loop_equals_eager(make(**kw), lambda d: (1e-4, 1e-4)); print(label, "PASS", flush=True)
    except BaseException as e:
        print(label, "FAIL", type(e).__name__, str(e)[:260].replace("\n", " "), flush=True)
t0 = time.time()
QUICK = "--quick" in sys.argv
for sizes in ((1, 4, 2, 3, 5), (4, 4), (1, 1)) + (() if QUICK else ((2,), (4, 2))):
    run(f"real sizes={sizes}", sizes)
run("real ref-attn torch-kernels (1,4,2,3,5)", (1, 4, 2, 3, 5), ref_attn=True, torch_kernels=True)
if not QUICK:
    run("emulated (1,4,2,3,5)", (1, 4, 2, 3, 5), emulate=True)
    run("real torch-kernels (1,4,2,3,5)", (1, 4, 2, 3, 5), torch_kernels=True)
    run("real ref-attn (1,4,2,3,5)", (1, 4, 2, 3, 5), ref_attn=True)
print("seconds", time.time() - t0)
