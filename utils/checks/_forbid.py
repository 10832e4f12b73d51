"""Groups of functions that from-scratch exercises may not call (see ``Exercise.forbidden``)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ._core import Forbidden, patched_entry

aten = torch.ops.aten

SOFTMAX = Forbidden(
    "torch.softmax / F.softmax / Tensor.softmax",
    (torch.softmax, torch.Tensor.softmax, F.softmax, torch.special.softmax, torch._softmax,
     torch.log_softmax, torch.Tensor.log_softmax, F.log_softmax, torch.special.log_softmax, F.softmin,
     torch._masked_softmax),
    # every softmax kernel of aten, the masked and sparse ones too (red team R2: torch._masked_softmax
    # with an all-False mask is a softmax of its own)
    (aten._softmax, aten._log_softmax, aten._safe_softmax, aten.softmax, aten.log_softmax,
     aten._masked_softmax, aten._sparse_softmax, aten._sparse_log_softmax),
)
LOGSUMEXP = Forbidden(
    "torch.logsumexp / Tensor.logsumexp",
    (torch.logsumexp, torch.Tensor.logsumexp, torch.special.logsumexp),
    (aten.logsumexp,),
)
SDPA = Forbidden(
    "F.scaled_dot_product_attention",
    (F.scaled_dot_product_attention,),
    (aten.scaled_dot_product_attention, aten._scaled_dot_product_attention_math,
     aten._scaled_dot_product_flash_attention_for_cpu, aten._safe_softmax),
)
MHA = Forbidden(
    "nn.MultiheadAttention / F.multi_head_attention_forward",
    (F.multi_head_attention_forward, torch._native_multi_head_attention,
     patched_entry(nn.MultiheadAttention, "forward")),
    (aten._native_multi_head_attention,),
)
LAYERNORM = Forbidden(
    "nn.LayerNorm / F.layer_norm / F.group_norm / F.instance_norm / F.batch_norm / F.rms_norm",
    (F.layer_norm, torch.layer_norm, torch.native_layer_norm, patched_entry(nn.LayerNorm, "forward"),
     # each computes a layer norm with a reshape (one group over the features; RMS norm of x - mean)
     F.group_norm, torch.group_norm, torch.native_group_norm, F.instance_norm, torch.instance_norm,
     F.batch_norm, torch.batch_norm, torch.native_batch_norm, F.rms_norm, torch.rms_norm),
    (aten.native_layer_norm, aten.layer_norm, aten.native_group_norm, aten.group_norm, aten.instance_norm,
     aten.batch_norm, aten.native_batch_norm, aten._native_batch_norm_legit,
     aten._native_batch_norm_legit_no_training, aten._batch_norm_impl_index, aten.rms_norm, aten._fused_rms_norm),
)
# Every path into the autograd engine (torch.autograd.grad, Tensor.backward, their aliases, and
# functions imported before the check started) goes through Variable._execution_engine.
AUTOGRAD = Forbidden(
    "autograd (backward / torch.autograd.grad, or forward mode)",
    (torch.autograd.grad, torch.Tensor.backward,
     patched_entry(torch.autograd, "grad"), patched_entry(torch.autograd, "backward"),
     patched_entry(torch.autograd.variable.Variable, "_execution_engine", proxy=True),
     patched_entry(torch.autograd.forward_ad, "make_dual")),
    # forward-mode AD (torch.autograd.forward_ad, torch.func.jvp / jacfwd) enters through
    # aten::_make_dual, not the engine (red team R3)
    (aten._make_dual,),
)
ATTENTION = (SOFTMAX, SDPA, MHA)
SOFTMAX_BACKWARD = Forbidden(
    "torch._softmax_backward_data (PyTorch's own softmax backward)",
    (torch._softmax_backward_data, torch.ops.aten._softmax_backward_data,
     torch.ops.aten._softmax_backward_data.default),
    (aten._softmax_backward_data,),
)
