"""EAGLE draft heads: one interface, two strategies (EAGLE-1 and EAGLE-3).

Both heads are a decoder layer that reads the token embedding together with a feature
vector and writes its K/V into the draft's own KV store, through the same
``AttentionBackend`` contract as the target (DRAFT_EXTEND, DRAFT_DECODE, EXTEND); an
EAGLE-1 head may stack more plain layers after it (``eagle_hal.model.eagle_layers``), each
with its own layer of that store. They differ in four decisions, each a method of the
strategy subclass:

================  =====================================  =======================================
decision          EAGLE-1                                EAGLE-3
================  =====================================  =======================================
target feature    the target's final (normed) hidden     ``fc`` over the concatenated residual
                  state                                  streams of three target layers
layer input       ``fc(cat(embed, hidden))`` [2H -> H],  ``cat(input_layernorm(embed),
                  the layer has no input norm            hidden_norm(hidden))`` [2H] into q/k/v
output norm       none                                   its own ``norm``
vocabulary        the target's ``lm_head``, over the     its own ``lm_head`` over a reduced
                  whole vocabulary or the rows of a      draft vocabulary, mapped back to target
                  draft vocabulary (``with_vocabulary``) ids: ``target = draft + d2t[draft]``
================  =====================================  =======================================

``forward`` returns the last layer's output *before* any norm: it is the ``hidden`` of the next
draft step. Parameter and buffer names are the published checkpoints' (SafeAILab EAGLE,
SpecForge), so ``state_dict()`` is the checkpoint layout. The target's embedding (and
EAGLE-1's ``lm_head``) are shared by reference, not registered: they are neither saved nor
returned by ``parameters()``.
"""

from __future__ import annotations

import abc
import copy

import torch
import torch.nn.functional as F
from torch import nn

from eagle_hal.hal.attention import AttentionBackend, AttentionConfig, ForwardBatch, KVStore
from eagle_hal.hal.model_kernels import ModelKernels
from eagle_hal.model.config import ModelConfig
from eagle_hal.model.eagle_layers import DraftLayer, Eagle3Layer, StackedDraftLayer
from eagle_hal.model.fusion import fuse_for_inference
from eagle_hal.model.layers import RMSNorm, RotaryEmbedding, lm_head_logits
from eagle_hal.model.llama import LlamaForCausalLM, ModelOutput
from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS

__all__ = ["Eagle1DraftModel", "Eagle3DraftModel", "EagleDraftModel", "default_eagle3_aux_layers"]


def default_eagle3_aux_layers(num_target_layers: int) -> tuple[int, int, int]:
    """The published EAGLE-3 feature layers: the residual streams entering layers
    ``(2, L // 2, L - 3)`` (HF ``hidden_states`` indices)."""
    return (2, num_target_layers // 2, num_target_layers - 3)


class EagleDraftModel(nn.Module, abc.ABC):
    """The draft-head interface the speculative worker uses.

    ``config`` is the draft layers' geometry (``num_layers`` of them: 1, or more for a
    stacked EAGLE-1 head); ``aux_layers`` the target layers whose residual streams the
    target must return (``()`` for EAGLE-1). Parameters are uninitialised until loaded
    (``eagle_hal.model.loading.load_eagle_head``).
    """

    aux_layers: tuple[int, ...] = ()

    def __init__(self, config: ModelConfig, target: LlamaForCausalLM) -> None:
        super().__init__()
        self.config = config
        self.target_vocab_size = target.config.vocab_size
        self._target_embedding = (target.model.embed_tokens,)  # shared, not registered
        self.rotary = RotaryEmbedding(config, target.device)

    # -- the strategy's decisions ---------------------------------------------------------

    @abc.abstractmethod
    def project_target_features(self, model_output: ModelOutput) -> torch.Tensor:
        """The feature ``[T, H]`` the first draft step reads, from the target's output."""

    @abc.abstractmethod
    def _layer_input(
        self, embeds: torch.Tensor, hidden: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(attention input, residual)`` from embeddings and features, both ``[T, H]``."""

    @abc.abstractmethod
    def _draft_layer(self) -> DraftLayer:
        """The head's first decoder layer (its KV is layer 0 of the draft's store)."""

    def _stacked_layers(self) -> tuple[StackedDraftLayer, ...]:
        """The layers after the first (EAGLE-1 heads of ``num_layers > 1``)."""
        return ()

    @abc.abstractmethod
    def _draft_logits(self, hidden_out: torch.Tensor) -> torch.Tensor:
        """Logits ``[n, draft_vocab]`` over the head's own vocabulary."""

    @abc.abstractmethod
    def _to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Map draft-vocabulary ids (any shape) to target ids."""

    @abc.abstractmethod
    def compute_logits(self, hidden_out: torch.Tensor) -> torch.Tensor:
        """Float32 logits ``[n, target_vocab]`` over the TARGET vocabulary; tokens outside the
        draft vocabulary get ``-inf``."""

    # -- shared computation ---------------------------------------------------------------

    @property
    def dtype(self) -> torch.dtype:
        return self._draft_layer().self_attn.q_proj.weight.dtype

    @property
    def embed_tokens(self) -> nn.Embedding:
        """The token embedding: the target's, shared (or a frozen copy of a checkpoint's own
        embedding when it differs from the target's)."""
        return self._target_embedding[0]

    def attention_config(self, kv_store: KVStore, req_to_token: torch.Tensor) -> AttentionConfig:
        """The ``AttentionConfig`` of the draft's attention (one KV layer per head layer)."""
        return AttentionConfig(
            num_heads=self.config.num_heads,
            num_kv_heads=self.config.num_kv_heads,
            head_dim=self.config.head_dim,
            num_layers=self.config.num_layers,
            scaling=self.config.head_dim**-0.5,
            kv_store=kv_store,
            req_to_token=req_to_token,
        )

    def forward(
        self,
        batch: ForwardBatch,
        attn: AttentionBackend,
        input_ids: torch.Tensor | None,
        hidden: torch.Tensor,
    ) -> torch.Tensor:
        """One draft step over ``batch`` (any causal mode, or DRAFT_DECODE).

        ``input_ids`` ``[T]`` (default ``batch.input_ids``) are the tokens; ``hidden``
        ``[T, H]`` is either ``project_target_features(...)`` or this head's previous output.
        Writes the draft K/V through ``attn`` (planning ``batch`` if needed). Returns the
        last layer's output ``[T, H]`` before any norm.
        """
        if batch.attn_metadata is None:
            batch.attn_metadata = attn.plan(batch)
        tokens = batch.input_ids if input_ids is None else input_ids
        hidden = hidden.to(self.dtype)
        embeds = self.embed_tokens(tokens).to(self.dtype)  # [T, H]
        attention_input, residual = self._layer_input(embeds, hidden)
        rotary = self.rotary.cos_sin(batch.positions, self.dtype)
        out = self._draft_layer()(attention_input, residual, rotary, batch, attn)
        for layer in self._stacked_layers():
            out = layer.run(out, rotary, batch, attn)
        return out

    @property
    def kernels(self) -> ModelKernels:
        """The model kernels installed in the draft layer (the reference until
        ``fuse_for_inference``)."""
        return self._draft_layer().self_attn.kernels

    def fuse_for_inference(self, kernels: ModelKernels = REFERENCE_MODEL_KERNELS) -> None:
        """Q/K/V and gate/up as one GEMM each, ``kernels`` in the layer (see
        ``eagle_hal.model.fusion``). For inference only: a head being trained stays unfused
        (``state_dict`` names are unchanged either way)."""
        fuse_for_inference(kernels, self)

    def topk(self, hidden_out: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` most probable next tokens under the draft distribution (softmax over
        the draft vocabulary): ``(probs [n, k] float32, target_token_ids [n, k])``. Through
        the installed kernels' ``softmax_topk`` where they have one (``fuse_for_inference``),
        else torch's softmax and topk."""
        logits = self._draft_logits(hidden_out)  # [n, draft_vocab]
        softmax_topk = self.kernels.softmax_topk
        if softmax_topk is not None:
            top_probs, draft_ids = softmax_topk(logits, k)
        else:
            # (softmax and top-k also for chains: an argmax-and-logsumexp top-1 is slower in
            # eager use, chain decoding 675 against 1,056 tokens/s on an H200 in
            # ``eagle-hal bench --modes plain,chain``)
            top_probs, draft_ids = torch.softmax(logits.float(), dim=-1).topk(k, dim=-1)
        return top_probs, self._to_target_ids(draft_ids)


class Eagle1DraftModel(EagleDraftModel):
    """EAGLE-1: ``fc`` over ``cat(embedding, feature)``, a decoder layer without its input
    norm (then, for ``config.num_layers > 1``, plain pre-norm layers), the target's
    ``lm_head`` on the un-normed output. Names: ``fc.{weight,bias}``,
    ``layers.0.self_attn.{q,k,v,o}_proj.weight``, ``layers.0.post_attention_layernorm.weight``,
    ``layers.0.mlp.{gate,up,down}_proj.weight``; ``layers.i`` for ``i >= 1`` also
    ``layers.i.input_layernorm.weight``."""

    def __init__(
        self,
        config: ModelConfig,
        target: LlamaForCausalLM,
        *,
        fc_bias: bool = True,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(config, target)
        if config.hidden_size != target.config.hidden_size:
            raise ValueError(
                f"an EAGLE-1 head's hidden size ({config.hidden_size}) must equal the "
                f"target's ({target.config.hidden_size})"
            )
        if config.num_layers < 1:
            raise ValueError(f"an EAGLE-1 head has at least 1 layer, got {config.num_layers}")
        with torch.device("meta"):
            self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=fc_bias)
            self.layers = nn.ModuleList(
                [DraftLayer(config, config.hidden_size)]
                + [StackedDraftLayer(config, i) for i in range(1, config.num_layers)]
            )
        self.to_empty(device=target.device)
        self.to(dtype or target.dtype)
        self._target_lm_head = (target.lm_head,)  # shared, not registered
        # a draft vocabulary (``with_vocabulary``): the target ids it drafts from and their
        # lm_head rows; None drafts from the whole vocabulary
        self._vocab_ids: torch.Tensor | None = None  # [V'] int64
        self._vocab_rows: torch.Tensor | None = None  # [V', H]

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        # .to() / .cuda() / .half() reach the draft vocabulary's rows and ids too (a view
        # shares its modules: moving the view moves the head, and the view's rows follow)
        out = super()._apply(fn, recurse)
        rows = getattr(self, "_vocab_rows", None)
        if rows is not None:
            self._vocab_rows = fn(rows)
            self._vocab_ids = self._vocab_ids.to(self._vocab_rows.device)
        return out

    @property
    def draft_vocab_size(self) -> int:
        """How many tokens the head may propose."""
        return self.target_vocab_size if self._vocab_ids is None else self._vocab_ids.numel()

    def with_vocabulary(self, token_ids: torch.Tensor | None) -> Eagle1DraftModel:
        """A view of this head (every parameter and module shared, nothing copied but the
        ``lm_head`` rows of ``token_ids``) that drafts only among ``token_ids`` ``[V']``
        (distinct target ids): its softmax runs over those tokens alone. ``None``: the whole
        vocabulary. Lossless either way, as the target verifies every draft token. Raises
        ``ValueError`` for ids out of range, repeated or none."""
        view = copy.copy(self)  # nn.Module's dicts of parameters and modules stay shared
        if token_ids is None:
            view._vocab_ids = view._vocab_rows = None
            return view
        ids = torch.as_tensor(token_ids, dtype=torch.int64).flatten().cpu()
        if ids.numel() == 0 or ids.unique().numel() != ids.numel():
            raise ValueError("a draft vocabulary lists at least one token id, each once")
        if int(ids.min()) < 0 or int(ids.max()) >= self.target_vocab_size:
            raise ValueError(f"draft vocabulary ids must lie in [0, {self.target_vocab_size})")
        lm_head = self._target_lm_head[0]
        # a vocabulary-parallel lm_head gathers the rows from its shards (``rows``)
        device = lm_head.weight.device
        rows = lm_head.rows(ids) if hasattr(lm_head, "rows") else lm_head.weight[ids.to(device)]
        view._vocab_ids = ids.to(device)
        view._vocab_rows = rows.detach().contiguous()  # [V', H]
        return view

    def project_target_features(self, model_output: ModelOutput) -> torch.Tensor:
        return model_output.hidden_states  # [T, H]

    def _layer_input(
        self, embeds: torch.Tensor, hidden: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        fused = self.fc(torch.cat([embeds, hidden], dim=-1))  # [T, H]
        return fused, fused

    def _draft_layer(self) -> DraftLayer:
        return self.layers[0]

    def _stacked_layers(self) -> tuple[StackedDraftLayer, ...]:
        return tuple(self.layers[1:])

    def _draft_logits(self, hidden_out: torch.Tensor) -> torch.Tensor:
        if self._vocab_rows is not None:
            hidden_out = hidden_out.to(self._vocab_rows.dtype)
            kernel = self.kernels.logits  # the installed kernels' lm_head product, if any
            if kernel is not None:
                return kernel(hidden_out, self._vocab_rows)  # [n, V']
            return F.linear(hidden_out, self._vocab_rows)
        lm_head = self._target_lm_head[0]  # called as a module: it may be vocabulary-parallel
        return lm_head_logits(self.kernels, lm_head, hidden_out.to(lm_head.weight.dtype))

    def _to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids if self._vocab_ids is None else self._vocab_ids[draft_ids]

    def compute_logits(self, hidden_out: torch.Tensor) -> torch.Tensor:
        draft = self._draft_logits(hidden_out).float()
        if self._vocab_ids is None:
            return draft
        logits = draft.new_full((draft.shape[0], self.target_vocab_size), float("-inf"))
        logits[:, self._vocab_ids] = draft
        return logits  # [n, target_vocab]


class Eagle3DraftModel(EagleDraftModel):
    """EAGLE-3: ``fc`` (3 target features -> H), ``midlayer`` whose attention reads
    ``cat(input_layernorm(embed), hidden_norm(hidden))``, own ``norm`` and ``lm_head`` over
    ``draft_vocab_size`` tokens, ``d2t`` ``[draft_vocab]`` (target id = draft id + d2t) and
    ``t2d`` ``[target_vocab]`` bool (target token is in the draft vocabulary).

    ``norm_before_residual`` (a config flag of some checkpoints) adds the normed hidden
    state, not the raw one, to the attention output.
    """

    def __init__(
        self,
        config: ModelConfig,
        target: LlamaForCausalLM,
        *,
        draft_vocab_size: int,
        target_hidden_size: int | None = None,
        aux_layers: tuple[int, ...] | None = None,
        norm_before_residual: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(config, target)
        if config.num_layers != 1:
            raise ValueError(f"an EAGLE-3 head has one layer, got {config.num_layers}")
        self.aux_layers = aux_layers or default_eagle3_aux_layers(target.config.num_layers)
        if len(self.aux_layers) != 3:
            raise ValueError(f"EAGLE-3 fuses exactly 3 target layers, got {self.aux_layers}")
        self.draft_vocab_size = draft_vocab_size
        self.norm_before_residual = norm_before_residual
        feature_size = target_hidden_size or target.config.hidden_size
        with torch.device("meta"):
            self.fc = nn.Linear(3 * feature_size, config.hidden_size, bias=False)
            self.midlayer = Eagle3Layer(config)
            self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
            self.lm_head = nn.Linear(config.hidden_size, draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.ones(self.target_vocab_size, dtype=torch.bool))
        self.to_empty(device=target.device)
        self.to(dtype or target.dtype)
        self.d2t.zero_()  # identity map until a checkpoint's d2t is loaded
        self.t2d.fill_(True)

    def project_target_features(self, model_output: ModelOutput) -> torch.Tensor:
        if len(model_output.aux_hidden_states) != 3:
            raise ValueError(
                "EAGLE-3 needs the target's residual streams of 3 layers: run the target "
                f"with aux_layers={self.aux_layers}"
            )
        features = torch.cat(model_output.aux_hidden_states, dim=-1)  # [T, 3 * H_target]
        return self.fc(features.to(self.dtype))  # [T, H]

    def _layer_input(
        self, embeds: torch.Tensor, hidden: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        normed = self.midlayer.hidden_norm(hidden)
        attention_input = torch.cat([self.midlayer.input_layernorm(embeds), normed], dim=-1)
        return attention_input, normed if self.norm_before_residual else hidden

    def _draft_layer(self) -> DraftLayer:
        return self.midlayer

    def _draft_logits(self, hidden_out: torch.Tensor) -> torch.Tensor:
        return lm_head_logits(self.kernels, self.lm_head, self.norm(hidden_out))

    def _to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    def compute_logits(self, hidden_out: torch.Tensor) -> torch.Tensor:
        draft = self._draft_logits(hidden_out).float()  # [n, draft_vocab]
        target_ids = self._to_target_ids(torch.arange(self.draft_vocab_size, device=draft.device))
        logits = draft.new_full((draft.shape[0], self.target_vocab_size), float("-inf"))
        logits[:, target_ids] = draft
        return logits  # [n, target_vocab]
