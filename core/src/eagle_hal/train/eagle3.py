"""Training an EAGLE-3 head: its initial weights, its inference copy, and its loss.

What differs from EAGLE-1 (``train.loss``, ``train.trainer``):

* **Features.** The head reads ``fc`` over the residual streams entering 3 target layers
  (``Eagle3DraftModel.aux_layers``, by default ``default_eagle3_aux_layers``), so the
  ``FeatureStore`` keeps those streams (``3H`` a token) and, for the labels only, the
  final normed state (``H``): ``4H`` numbers a token against EAGLE-1's ``H``.
* **Loss.** The cross-entropy against the target's next-token distribution alone: the
  head's output feeds its own ``norm`` and ``lm_head``, not the target's, so it is not in
  the target's feature space and regressing it onto the target's features would constrain
  it for nothing.
* **Alignment.** Step 1 at draft position ``i`` reads token ``x[i + 1]`` with
  ``fc(streams[i])`` (``project_target_features``, the inference code itself, so the
  gradient flows into ``fc``); step ``s >= 2`` reads the head's own step ``s - 1`` layer
  output, before its ``norm``, as ``speculative.drafting`` feeds ``run_draft``'s output back at
  inference (the next step's ``hidden_norm`` normalises it). ``train.loss.unrolled_loss``
  does the rest, exactly as for EAGLE-1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from eagle_hal.model.eagle import Eagle3DraftModel, default_eagle3_aux_layers
from eagle_hal.model.llama import LlamaForCausalLM, ModelOutput
from eagle_hal.train.dataset import PaddedRows
from eagle_hal.train.initial_weights import draw_initial_weights
from eagle_hal.train.loss import UnrolledLossParts, add_uniform_noise, unrolled_loss

__all__ = ["copy_eagle3", "eagle3_feature_layers", "init_eagle3", "unrolled_eagle3_loss"]


def eagle3_feature_layers(target: LlamaForCausalLM) -> tuple[int, ...]:
    """The target layers whose input residual streams a new EAGLE-3 head fuses (the
    published default). Raises ``ValueError`` for a target too shallow to have them."""
    num_layers = target.config.num_layers
    layers = default_eagle3_aux_layers(num_layers)
    if not all(1 <= layer <= num_layers for layer in layers):
        raise ValueError(
            f"a target of {num_layers} layers has no EAGLE-3 feature layers: the default "
            f"{layers} needs at least 4 layers"
        )
    return layers


def init_eagle3(target: LlamaForCausalLM, seed: int) -> Eagle3DraftModel:
    """A fresh float32 EAGLE-3 head with the target's layer geometry over the target's
    whole vocabulary (``d2t`` zeros, ``t2d`` all true): ``fc`` and the layer's linear
    weights N(0, 0.02), norm weights 1; ``norm`` and ``lm_head`` copies of the target's
    final norm and ``lm_head``. Raises ``ValueError`` as ``eagle3_feature_layers``."""
    config = dataclasses.replace(target.config, num_layers=1)
    head = Eagle3DraftModel(
        config,
        target,
        draft_vocab_size=target.config.vocab_size,
        aux_layers=eagle3_feature_layers(target),
        dtype=torch.float32,
    )
    # Training starts from the target's readout: a head whose output lies where the
    # target's last residual stream does already scores tokens as the target would, so the
    # layer learns to predict a state, not a vocabulary projection from scratch. Copies,
    # not shared: they are the head's own and train with it (the target stays frozen).
    readout = {"norm.weight": target.model.norm.weight, "lm_head.weight": target.lm_head.weight}
    draw_initial_weights(head, seed, readout)
    return head


def copy_eagle3(
    head: Eagle3DraftModel, target: LlamaForCausalLM, dtype: torch.dtype
) -> Eagle3DraftModel:
    """A copy of ``head``'s weights and id maps in ``dtype`` (for inference or saving),
    sharing the target's embedding."""
    copy = Eagle3DraftModel(
        head.config,
        target,
        draft_vocab_size=head.draft_vocab_size,
        target_hidden_size=head.fc.in_features // 3,
        aux_layers=head.aux_layers,
        norm_before_residual=head.norm_before_residual,
        dtype=dtype,
    )
    copy.load_state_dict(head.state_dict())
    return copy.eval()


def unrolled_eagle3_loss(
    head: Eagle3DraftModel,
    target: LlamaForCausalLM,
    rows: PaddedRows,
    features: torch.Tensor,
    *,
    step_weights: Sequence[float] = (1.0,),
    relative_noise: float = 0.0,
    cross_entropy_weight: float = 1.0,
    generator: torch.Generator | None = None,
) -> UnrolledLossParts:
    """The EAGLE-3 loss of ``head`` unrolled ``len(step_weights)`` steps over ``features``
    ``[B, L, 4H]`` (``FeatureStore`` rows: the 3 layer streams, then the final normed
    state): ``sum_s w_s * cross_entropy_weight * cross_entropy_s`` (``parts.regression``
    holds zeros). Uniform noise of half-width ``relative_noise`` times the RMS of step 1's
    input goes on that input. Raises ``ValueError`` as ``train.loss.unrolled_loss``."""
    hidden_size = target.config.hidden_size
    streams = features[:, :-1, :-hidden_size]  # [B, L - 1, 3H] positions 0 .. L - 2
    final = features[:, :, -hidden_size:]  # [B, L, H]
    layers = ModelOutput(final[:, :-1], tuple(streams.split(hidden_size, dim=-1)))
    hidden_in = head.project_target_features(layers)  # [B, L - 1, H] fc(streams)
    if relative_noise > 0:
        # Noise on fc's output, not on the raw streams: what a later draft step reads
        # instead of it is the head's own (imperfect) output, an H-vector of this space,
        # and the noise stands for that error, as EAGLE-1's noise on its input feature
        # does. On the raw streams it would mostly teach fc to average noise away (input
        # noise on a linear map acts as weight decay), and one scale would not fit all
        # three (the residual stream grows with depth). fc's output moves as fc learns, so
        # the half-width follows its RMS batch by batch (detached: a scale, not a path).
        half_width = relative_noise * hidden_in.detach().float().pow(2).mean().sqrt()
        hidden_in = add_uniform_noise(hidden_in, half_width, generator)
    return unrolled_loss(
        head,
        target,
        rows,
        hidden_in,
        final,
        step_weights=step_weights,
        regression_weight=None,
        cross_entropy_weight=cross_entropy_weight,
    )
