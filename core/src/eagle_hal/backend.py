"""What a backend plugin describes, and the object a selected backend is.

Two layers, so that discovery stays cheap:

* ``BackendDescriptor`` is what a plugin's light entry-point module returns. It names the
  backend, the torch device types it serves, its priority, the HAL ``api_version`` it was
  written against, a ``probe`` callable and the dotted path of the implementation. Building
  it imports no vendor library.
* ``Backend`` is the implementation, imported only when the backend is selected. It is bound
  to one concrete device and hands out the runtime pieces of the HAL contract: attention
  backends, sampling ops, model kernels, graph capture, KV layout and tolerances.

This module imports no tensors library at import time, and no implementation: the defaults
a ``Backend`` hands out where a subclass supplies none live in ``eagle_hal.backends.defaults``,
which imports each one when it is first asked for.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# The defaults a Backend hands out where a subclass supplies none. They import their
# implementations on first use and import nothing of this module, so no cycle runs
# through them; the spec kinds and the library's default spec are re-exported here for
# the imports that name this module.
from eagle_hal.backends import defaults as _defaults
from eagle_hal.backends.defaults import SPEC_KINDS, check_spec_kind, library_default_spec

# Re-exported: the layouts are part of the contract a backend declares (Capabilities).
from eagle_hal.hal.tree_mask import TreeMaskMode

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from eagle_hal.device import DeviceSpec
    from eagle_hal.hal.attention import AttentionBackend, AttentionConfig
    from eagle_hal.hal.graphs import GraphCapture
    from eagle_hal.hal.kv_layout import KVLayout
    from eagle_hal.hal.model_kernels import ModelKernels
    from eagle_hal.hal.sampling import SamplingOps

__all__ = [
    "API_VERSION",
    "Availability",
    "Backend",
    "BackendDescriptor",
    "Capabilities",
    "SPEC_KINDS",
    "TreeMaskMode",
    "Tolerances",
    "check_spec_kind",
    "library_default_spec",
]

# The HAL contract version. MAJOR changes break plugins; a plugin written against
# (major, minor) works with any core of the same major and minor >= the plugin's minor.
# 1.1: attention configs may carry sliding windows and a score soft-cap, applied by the
# backends whose ``Capabilities`` say so.
API_VERSION: tuple[int, int] = (1, 1)


@dataclasses.dataclass(frozen=True, slots=True)
class Availability:
    """The result of a probe: whether the backend can run here, and if not, why."""

    ok: bool
    reason: str = ""

    @classmethod
    def available(cls, reason: str = "") -> Availability:
        return cls(True, reason)

    @classmethod
    def unavailable(cls, reason: str) -> Availability:
        if not reason:
            raise ValueError("an unavailable backend must say why")
        return cls(False, reason)


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend supports. Features and conformance checks are gated on these fields.

    ``asynchronous``: the device runs queued work while the host goes on (an accelerator's
    stream), so the engine overlaps host work with the device's, copies host data from
    pinned memory without waiting, and ``Backend.synchronize`` must wait for the device;
    ``False`` (the host CPU, or a backend bound to it) runs each operation before the call
    returns. A backend bound to the host must say ``False``: pinned memory needs an
    accelerator."""

    graph_capture: bool = False
    asynchronous: bool = False
    dtypes: tuple[str, ...] = ("float32",)
    tree_mask_modes: tuple[str, ...] = (TreeMaskMode.TREE_BLOCK,)
    page_sizes: tuple[int, ...] = ()  # empty: any page size >= 1
    page_size_multiple: int = 1  # a page size must be a multiple of this
    triton: bool = False
    distributed_backend: str = "gloo"
    visible_devices_env: str | None = None
    fused_sampling_ops: tuple[str, ...] = ()  # SamplingOps methods replaced by fused kernels
    # a kernel may start while the one before it finishes, waiting in-kernel for its
    # results (programmatic dependent launch): the Triton projections overlap their
    # weight loads with the previous kernel
    dependent_launch: bool = False
    # Whether the attention applies ``AttentionConfig.layer_windows`` (sliding windows) and
    # ``logit_softcap`` (API 1.1). Without them the engine stops a windowed model's requests
    # at the window and refuses a soft-capped model.
    sliding_window: bool = False
    logit_softcap: bool = False
    notes: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.tree_mask_modes) - set(TreeMaskMode.ALL)
        if unknown:
            raise ValueError(
                f"unknown tree-mask modes {sorted(unknown)}; known: {TreeMaskMode.ALL}")
        if not self.tree_mask_modes:
            raise ValueError("a backend must accept at least one tree-mask mode")
        if self.page_size_multiple < 1 or any(p < 1 for p in self.page_sizes):
            raise ValueError("page sizes must be positive")

    def supports_page_size(self, page_size: int) -> bool:
        if page_size < 1 or page_size % self.page_size_multiple:
            return False
        return not self.page_sizes or page_size in self.page_sizes

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Tolerances:
    """Numeric tolerances a backend declares for the conformance suite, per dtype."""

    atol: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"float32": 1e-4, "bfloat16": 2e-2, "float16": 5e-3}
    )
    rtol: dict[str, float] = dataclasses.field(
        default_factory=lambda: {"float32": 1e-4, "bfloat16": 2e-2, "float16": 5e-3}
    )

    def for_dtype(self, dtype: str) -> tuple[float, float]:
        return self.atol.get(dtype, 1e-4), self.rtol.get(dtype, 1e-4)


@dataclasses.dataclass(frozen=True, slots=True)
class BackendDescriptor:
    """What a plugin's entry-point module declares about one backend (no vendor import).

    ``implementation`` is ``"package.module:ClassName"``; the class is a ``Backend`` subclass
    taking ``(descriptor, device_spec)``. ``probe`` must never raise; the registry guards it
    anyway and reports a raising probe as a plugin error.
    """

    name: str
    # Device-string kinds it serves, most specific first: torch device types ("cuda") plus
    # aliases it alone answers to ("rocm", "hip"). See eagle_hal.device.
    device_types: tuple[str, ...]
    implementation: str
    probe: Callable[[], Availability]
    api_version: tuple[int, int] = API_VERSION
    priority: int = 0  # higher wins when several available backends serve one device type
    description: str = ""
    # What the backend supports nominally, as declared without touching a device; shown by
    # `eagle-hal backends`. The bound ``Backend.capabilities`` is authoritative and may refine.
    capabilities: Capabilities | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"backend name {self.name!r} must be alphanumeric (with - or _)")
        if not self.device_types:
            raise ValueError(f"backend {self.name!r} declares no device types")
        if ":" not in self.implementation:
            raise ValueError(
                f"backend {self.name!r}: implementation must be 'module:Class', "
                f"got {self.implementation!r}"
            )


class Backend(abc.ABC):
    """A selected backend, bound to one device. Subclasses live in plugin packages.

    The constructor must be cheap and must not allocate device memory; heavy state is made
    by the factories below when the engine asks for it.
    """

    def __init__(self, descriptor: BackendDescriptor, device: DeviceSpec) -> None:
        self.descriptor = descriptor
        self.device_spec = device

    @property
    def name(self) -> str:
        return self.descriptor.name

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """What this backend supports on this device."""

    @property
    @abc.abstractmethod
    def torch_device(self) -> torch.device:
        """The torch device tensors are placed on (``torch.device('cuda', 0)``, ...)."""

    @abc.abstractmethod
    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """A new attention backend for one model (target or draft) over its KV storage."""

    def sampling_ops(self) -> SamplingOps:
        """The tree and sampling operations; the pure-torch reference unless overridden."""
        return _defaults.sampling_ops()

    def model_kernels(self) -> ModelKernels:
        """The kernels a model's layers run between GEMMs (RMSNorm, residual add + RMSNorm,
        rotary, SwiGLU's gate): the shared Triton ones, with the projections of small
        forwards fused into them and the draft's softmax top-k in one pass, where
        ``capabilities.triton`` says Triton runs on this device; else the pure-torch
        reference. Override to supply others. To compare variants, replace fields of the
        bundle (``dataclasses.replace(kernels, fused_linear=None)``: GEMMs at every size;
        ``softmax_topk=None``: torch's softmax and top-k) and hand it to
        ``LLM(model_kernels=...)``."""
        capabilities = self.capabilities
        return _defaults.model_kernels(capabilities.triton, capabilities.dependent_launch)

    def graph_capture(self) -> GraphCapture | None:
        """Device-graph capture, or ``None`` when this backend runs eagerly only."""
        return None

    def kv_layout(self) -> KVLayout:
        """The layout of per-layer K/V storage this backend's attention reads."""
        from eagle_hal.hal.kv_layout import KVLayout

        return KVLayout()

    @property
    def prefers_draft_vocabulary(self) -> bool:
        """Whether a head with a ranking (``draft_vocab.json``) should draft from its
        default draft vocabulary when the user names none (``draft_vocab="auto"``), rather
        than from the whole vocabulary. It pays where the lm_head product over the whole
        vocabulary is a large share of a draft step (a host CPU: 113 MB of float32 a step
        for SmolLM2); where it is not (an H200: bfloat16, the draft loop in one device
        graph), the tokens left out only shorten the accepted paths. Default ``False``."""
        return False

    def default_spec(self, kind: str = "chain") -> Any:
        """The ``SpecConfig`` to speculate with when the user gives none, per ``kind``:
        ``"chain"`` (what an ``LLM`` and ``eagle-hal generate`` use), ``"tree"`` and
        ``"adaptive"`` (``generate --adaptive`` and ``eagle-hal bench``'s modes). The
        library's defaults: a chain of S = 5, a tree of S = 5, K = 4, N = 16 and the
        adaptive mode over that tree. A backend overrides them where it knows better
        shapes for its device, such as shorter verify blocks where its GEMMs slow down
        past a few rows (the CPU)."""
        return _defaults.library_default_spec(kind)

    def tolerances(self) -> Tolerances:
        """Numeric tolerances for the conformance suite."""
        return Tolerances()

    def known_failures(self) -> dict[str, str]:
        """Conformance checks this backend is known to fail: check-id pattern -> reason.

        Patterns are ``fnmatch`` globs over check ids such as
        ``"attention/forward[target_verify-full-page16]"`` (see ``docs/conformance.md``). A
        matching check is expected to fail; if it passes, the suite reports an unexpected
        pass (and fails), so the declaration is kept honest.
        """
        return {}

    def library_versions(self) -> dict[str, str]:
        """Versions of the vendor libraries this backend runs on (driver, runtime, kernel
        libraries), for the conformance report. Empty unless overridden."""
        return {}

    def synchronize(self) -> None:
        """Wait for queued device work (used by benchmarks and the engine's timers); a
        backend whose device is not ``capabilities.asynchronous`` has none to wait for."""
        import torch

        if self.capabilities.asynchronous and hasattr(torch, "accelerator"):
            torch.accelerator.synchronize(self.torch_device)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on {self.device_spec}>"

