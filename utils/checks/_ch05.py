"""Checks for chapter 05 — self-attention and multi-head attention."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import reference as ref
from .._guard import ForbiddenCall, unguarded
from ._core import Case, CheckFailure, Exercise, Mutant, build_module, generator, randn, rng
from ._forbid import MHA, SDPA
from ._registry import register

__all__ = [
    "check_SelfAttention",
    "check_MultiHeadAttention",
    "check_split_heads",
    "check_merge_heads",
]


def random_state(module: nn.Module, g: torch.Generator) -> dict:
    """Random parameters for ``module``, by name: N(0, 1/fan_in) weights, N(0, 0.1²) biases.

    Drawn from ``g`` (not from the module's own init), so the learner's module gets exactly the
    reference's parameters whatever order it creates them in.
    """
    state = {}
    for name, t in module.state_dict().items():
        scale = 1.0 / math.sqrt(t.shape[-1]) if t.dim() == 2 else 0.1
        state[name] = randn(*t.shape, gen=g, scale=scale)
    return state


def _key_padding(batch: int, s_k: int, g: torch.Generator, pad_all: bool = False) -> torch.Tensor:
    """(B, 1, 1, S_k) bool, True = real token; each row keeps >= 1 key unless ``pad_all``."""
    lengths = torch.randint(1, s_k + 1, (batch,), generator=g)
    lengths[0] = max(1, s_k - 2)
    mask = torch.arange(s_k)[None, :] < lengths[:, None]  # (B, S_k)
    if pad_all:
        mask[-1] = False  # the last sequence is all padding: its rows are fully masked
    return mask[:, None, None, :]


# ---------------------------------------------------------------- SelfAttention
def _self_attention_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, B, S, d_model, d_k=None, d_v=None, mask=None, scale=1.0):
        kwargs = {k: v for k, v in (("d_k", d_k), ("d_v", d_v)) if v is not None}
        module = unguarded(ref.SelfAttention)(d_model, **kwargs)
        x = randn(B, S, d_model, gen=g, scale=scale)
        dims = f"x {tuple(x.shape)}, SelfAttention({d_model}" + "".join(f", {k}={v}" for k, v in kwargs.items()) + ")"
        if mask is not None:
            dims += f", mask {tuple(mask.shape)}"
        init = {"ctor": (d_model,), "ctor_kwargs": kwargs, "seed": seed, "state": random_state(module, g)}
        cases.append(Case(f"{label}: {dims}", (x,), {"mask": mask} if mask is not None else {}, init=init))

    add("d_k = d_v = d_model", 2, 5, 8)
    add("d_k < d_model", 2, 6, 8, d_k=4)
    add("d_k ≠ d_v ≠ d_model", 3, 4, 6, d_k=4, d_v=5)
    add("d_v given, d_k defaults to d_model", 1, 5, 5, d_v=3)
    add("a single position (S = 1)", 2, 1, 6, d_k=3)
    add("large-magnitude inputs", 2, 6, 16, d_k=8, scale=6.0)
    add("causal mask (S, S)", 2, 6, 8, d_k=4, mask=torch.ones(6, 6, dtype=torch.bool).tril())
    kp = torch.ones(3, 1, 5, dtype=torch.bool)
    kp[1, :, 3:] = False
    add("key padding mask (B, 1, S)", 3, 5, 8, d_k=6, mask=kp)
    m = torch.rand(2, 5, 5, generator=g) > 0.4
    m[..., 0] = True
    m[0, 2] = False
    add("mask (B, S, S) with a fully masked query row", 2, 5, 7, d_k=5, d_v=3, mask=m)
    for i in range(5):  # random shapes, odd sizes included
        B, S, d_model = r.randint(1, 3), r.randint(1, 9), r.choice([3, 5, 8, 12])
        d_k = r.choice([None, 2, 4, 7])
        d_v = r.choice([None, 1, 3, 6])
        mask = None
        if i % 2:
            mask = torch.rand(B, S, S, generator=g) > 0.4
            mask[..., 0] = True
        add(f"random case {i + 1}", B, S, d_model, d_k, d_v, mask=mask)
    return cases


_SelfAttention = unguarded(ref.SelfAttention)


class _SelfAttentionVariant(_SelfAttention):
    """The reference with one knob turned; each subclass below is one known mistake."""

    scale_dim = "d_k"
    softmax_dim = -1
    mask_mode = "before"  # "before" the softmax (correct), "after" it, or "ignored"

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        d = {"d_k": self.d_k, "d_model": self.W_q.in_features, "none": 1}[self.scale_dim]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        if mask is not None and self.mask_mode == "before":
            scores = scores.masked_fill(~mask, float("-inf"))
        w = torch.softmax(scores, dim=self.softmax_dim).nan_to_num(0.0)
        if mask is not None and self.mask_mode == "after":
            w = w * mask
        return w @ v, w


def _variant(base, name, **attrs):
    return type(name, (base,), attrs)


SELF_ATTENTION_MUTANTS = [
    Mutant("no_scaling", "the scores were not divided by sqrt(d_k).",
           _variant(_SelfAttentionVariant, "SelfAttention", scale_dim="none")),
    Mutant("scale_by_sqrt_d_model", "the scores were divided by sqrt(d_model) instead of sqrt(d_k), the size of the projected q and k.",
           _variant(_SelfAttentionVariant, "SelfAttention", scale_dim="d_model")),
    Mutant("softmax_wrong_dim", "the softmax was taken over the query dim (-2) instead of the key dim (-1): each row of weights must sum to 1.",
           _variant(_SelfAttentionVariant, "SelfAttention", softmax_dim=-2)),
    Mutant("mask_ignored", "the mask was ignored: fill the scores with -inf where the mask is False, before the softmax.",
           _variant(_SelfAttentionVariant, "SelfAttention", mask_mode="ignored")),
    Mutant("mask_after_softmax", "the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores with -inf before the softmax.",
           _variant(_SelfAttentionVariant, "SelfAttention", mask_mode="after")),
]

SELF_ATTENTION_EXERCISE = Exercise(
    name="SelfAttention",
    reference=ref.SelfAttention,
    make_cases=_self_attention_cases,
    kind="class",
    forbidden=(SDPA, MHA),
    mutants=SELF_ATTENTION_MUTANTS,
    output_names=("out", "weights"),
)
check_SelfAttention = register(SELF_ATTENTION_EXERCISE)


# ---------------------------------------------------------------- MultiHeadAttention.forward
def _mha_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, B, s_q, s_k, d_model, H, mask=None, dropout=0.0, bias=True, kind="cross", scale=1.0):
        module = unguarded(ref.MultiHeadAttention)(d_model, H, dropout, bias)
        query = randn(B, s_q, d_model, gen=g, scale=scale)
        if kind == "self":  # self-attention: query, key and value are the same tensor
            key = value = query
        elif kind == "memory":  # cross-attention over one memory: key is value
            key = value = randn(B, s_k, d_model, gen=g, scale=scale)
        else:  # key and value differ
            key = randn(B, s_k, d_model, gen=g, scale=scale)
            value = randn(B, s_k, d_model, gen=g)
        ctor_kwargs = {}
        if dropout:
            ctor_kwargs["dropout"] = dropout
        if not bias:
            ctor_kwargs["bias"] = False
        dims = (f"query {tuple(query.shape)}, key/value {tuple(key.shape)}"
                if kind != "self" else f"query = key = value {tuple(query.shape)}")
        dims += f", MultiHeadAttention({d_model}, num_heads={H}" + "".join(f", {k}={v}" for k, v in ctor_kwargs.items()) + ")"
        if mask is not None:
            dims += f", mask {tuple(mask.shape)}"
        init = {"ctor": (d_model, H), "ctor_kwargs": ctor_kwargs, "seed": seed, "state": random_state(module, g)}
        cases.append(Case(f"{label}: {dims}", (query, key, value), {"mask": mask} if mask is not None else {}, init=init))

    add("self-attention", 2, 5, 5, 8, 2, kind="self")
    add("cross-attention, S_q ≠ S_k, key = value", 2, 3, 6, 8, 2, kind="memory")
    add("cross-attention, key ≠ value", 2, 4, 7, 12, 3)
    add("one query, one key (S = 1)", 2, 1, 1, 8, 4)
    add("one query, many keys (a decoding step)", 3, 1, 5, 6, 2)
    add("a single head (H = 1)", 2, 4, 5, 6, 1)
    add("heads of size 1 (D_h = 1)", 2, 5, 3, 4, 4)
    add("odd sizes, D_h = 3", 1, 7, 5, 15, 5)
    add("bias=False", 2, 4, 6, 8, 2, bias=False)
    add("dropout=0.3 in eval mode", 2, 5, 4, 8, 2, dropout=0.3)
    add("large-magnitude inputs", 2, 5, 6, 16, 4, scale=4.0)
    add("key padding mask (B, 1, 1, S_k)", 3, 4, 6, 8, 2, mask=_key_padding(3, 6, g))
    add("causal mask (S, S) over (B, H)", 2, 6, 6, 8, 4, mask=torch.ones(6, 6, dtype=torch.bool).tril(), kind="self")
    m = torch.rand(2, 1, 5, 7, generator=g) > 0.4
    m[..., 0] = True
    m[0, 0, 2] = False
    add("mask (B, 1, S_q, S_k) with a fully masked query row", 2, 5, 7, 12, 3, mask=m)
    add("a sequence that is all padding", 3, 3, 5, 8, 2, mask=_key_padding(3, 5, g, pad_all=True), kind="memory")
    for i in range(4):  # random shapes, odd sizes included
        H, d_h = r.choice([1, 2, 3, 4]), r.choice([1, 2, 3, 5])
        B, s_q, s_k = r.randint(1, 3), r.randint(1, 7), r.randint(1, 7)
        mask = _key_padding(B, s_k, g) if i % 2 else None
        add(f"random case {i + 1}", B, s_q, s_k, H * d_h, H, mask=mask)
    return cases


_MHA = unguarded(ref.MultiHeadAttention)


def _split_view_no_transpose(self, x):
    B, S, _ = x.shape
    return x.reshape(B, self.num_heads, S, self.d_head)


def _merge_view_no_transpose(self, x):
    B, H, S, D_h = x.shape
    return x.reshape(B, S, H * D_h)


class _MHAVariant(_MHA):
    """The reference forward with one knob turned; each subclass below is one known mistake."""

    scale_dim = "d_head"
    softmax_dim = -1
    use_mask = True
    use_W_o = True
    swap_qk_projections = False
    value_from_key = False
    average_heads = False
    dropout_always = False

    def forward(self, query, key, value, mask=None):
        W_q, W_k = (self.W_k, self.W_q) if self.swap_qk_projections else (self.W_q, self.W_k)
        q = self.split_heads(W_q(query))
        k = self.split_heads(W_k(key))
        v = self.split_heads(self.W_v(key if self.value_from_key else value))
        d = {"d_head": self.d_head, "d_model": self.d_model, "none": 1}[self.scale_dim]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        if mask is not None and self.use_mask:
            scores = scores.masked_fill(~mask, float("-inf"))
        w = torch.softmax(scores, dim=self.softmax_dim).nan_to_num(0.0)
        if self.dropout_always:
            w = F.dropout(w, self.dropout.p, training=True)
        out = self.merge_heads(w @ v)
        if self.use_W_o:
            out = self.W_o(out)
        return out, (w.mean(dim=1) if self.average_heads else w)


MHA_MUTANTS = [
    Mutant("heads_mixed_in_split", "heads were mixed up in split_heads: view (B, S, d_model) as (B, S, H, D_h), then transpose to (B, H, S, D_h); a direct view to (B, H, S, D_h) scrambles positions and features.",
           _variant(_MHAVariant, "MultiHeadAttention", split_heads=_split_view_no_transpose)),
    Mutant("heads_mixed_in_merge", "heads were mixed up in merge_heads: transpose (B, H, S, D_h) to (B, S, H, D_h) first, then reshape to (B, S, d_model); a direct view scrambles positions and heads.",
           _variant(_MHAVariant, "MultiHeadAttention", merge_heads=_merge_view_no_transpose)),
    Mutant("no_scaling", "the scores were not divided by sqrt(D_h), the head size.",
           _variant(_MHAVariant, "MultiHeadAttention", scale_dim="none")),
    Mutant("scale_by_sqrt_d_model", "the scores were divided by sqrt(d_model) instead of sqrt(D_h) = sqrt(d_model / num_heads): each head's q·k is a sum over D_h terms.",
           _variant(_MHAVariant, "MultiHeadAttention", scale_dim="d_model")),
    Mutant("missing_W_o", "the output projection W_o is missing: apply W_o to the merged heads.",
           _variant(_MHAVariant, "MultiHeadAttention", use_W_o=False)),
    Mutant("softmax_wrong_dim", "the softmax was taken over the query dim (-2) instead of the key dim (-1): each row of weights must sum to 1.",
           _variant(_MHAVariant, "MultiHeadAttention", softmax_dim=-2)),
    Mutant("mask_ignored", "the mask was ignored: fill the scores with -inf where the mask is False, before the softmax (the mask broadcasts over heads).",
           _variant(_MHAVariant, "MultiHeadAttention", use_mask=False)),
    Mutant("qk_projections_swapped", "the query was projected with W_k and the key with W_q: use W_q on query and W_k on key (the parameters are loaded by name).",
           _variant(_MHAVariant, "MultiHeadAttention", swap_qk_projections=True)),
    Mutant("value_from_key", "the values were projected from `key` instead of `value`: in cross-attention key and value can be different tensors.",
           _variant(_MHAVariant, "MultiHeadAttention", value_from_key=True)),
    Mutant("weights_averaged_over_heads", "the weights were averaged over heads (what nn.MultiheadAttention returns by default); return the per-head weights (B, H, S_q, S_k).",
           _variant(_MHAVariant, "MultiHeadAttention", average_heads=True)),
    Mutant("dropout_in_eval_mode", "dropout was applied in eval mode: use nn.Dropout (or F.dropout(..., training=self.training)) so that model.eval() turns it off.",
           _variant(_MHAVariant, "MultiHeadAttention", dropout_always=True)),
]

NO_VALUE_ERROR = ("d_model not divisible by num_heads must raise ValueError in __init__ "
                  "(otherwise D_h = d_model // num_heads silently drops features).")


def _check_indivisible(cls) -> None:
    """MultiHeadAttention(10, 3) must raise ValueError."""
    try:
        cls(10, 3)
    except ValueError:
        return
    except ForbiddenCall:
        raise
    except Exception as err:  # noqa: BLE001 — say what was raised instead
        raise CheckFailure(
            f"MultiHeadAttention(d_model=10, num_heads=3) raised {type(err).__name__}: {err}. "
            f"Likely mistake: {NO_VALUE_ERROR}"
        ) from err
    raise CheckFailure(f"MultiHeadAttention(d_model=10, num_heads=3) did not raise. Likely mistake: {NO_VALUE_ERROR}")


class _NoValueError(_MHA):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        nn.Module.__init__(self)
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)


MHA_MUTANTS.append(Mutant("no_value_error", NO_VALUE_ERROR, _NoValueError))

MHA_EXERCISE = Exercise(
    name="MultiHeadAttention",
    reference=ref.MultiHeadAttention,
    make_cases=_mha_cases,
    kind="class",
    forbidden=(SDPA, MHA),
    mutants=MHA_MUTANTS,
    output_names=("out", "weights"),
    extra_checks=(_check_indivisible,),
)
check_MultiHeadAttention = register(MHA_EXERCISE)


# ---------------------------------------------------------------- split_heads / merge_heads
def _run_method(method: str):
    """Build the module (no parameters needed: only the ctor) and call ``method`` on the case's input."""

    def run(cls, case: Case):
        return getattr(build_module(cls, case), method)(*case.args)

    run.__name__ = f"run_{method}"
    return run


_HEAD_SHAPES = [  # (label, B, S, H, D_h)
    ("two heads", 2, 5, 2, 4),
    ("three heads, odd sizes", 1, 7, 3, 3),
    ("S = H (shapes alone cannot tell S from H)", 2, 4, 4, 2),
    ("heads of size 1 (D_h = 1)", 2, 3, 6, 1),
    ("a single position (S = 1)", 3, 1, 4, 2),
    ("a single head (H = 1)", 2, 5, 1, 6),
]


def _head_cases(seed: int, method: str) -> list:
    r, g = rng(seed), generator(seed)
    shapes = list(_HEAD_SHAPES)
    for i in range(4):
        shapes.append((f"random case {i + 1}", r.randint(1, 3), r.randint(1, 8), r.randint(2, 5), r.randint(1, 5)))
    cases = []
    for label, B, S, H, D_h in shapes:
        x = randn(B, S, H * D_h, gen=g) if method == "split" else randn(B, H, S, D_h, gen=g)
        init = {"ctor": (H * D_h, H), "seed": seed}
        ctor = f"MultiHeadAttention({H * D_h}, num_heads={H})"
        cases.append(Case(f"{label}: {ctor}.{method}_heads(x {tuple(x.shape)})", (x,), init=init))
    return cases


def _split_interleaved(self, x):
    B, S, _ = x.shape
    return x.view(B, S, self.d_head, self.num_heads).permute(0, 3, 1, 2)


def _split_no_transpose(self, x):
    B, S, _ = x.shape
    return x.view(B, S, self.num_heads, self.d_head)


def _split_into_batch(self, x):
    B, S, _ = x.shape
    return x.view(B, S, self.num_heads, self.d_head).transpose(1, 2).reshape(B * self.num_heads, S, self.d_head)


SPLIT_MUTANTS = [
    Mutant("view_without_transpose", "split_heads viewed (B, S, d_model) directly as (B, H, S, D_h): view it as (B, S, H, D_h) first, then transpose(1, 2).",
           _variant(_MHA, "MultiHeadAttention", split_heads=_split_view_no_transpose)),
    Mutant("interleaved_heads", "split_heads gave head h the features h, h + H, h + 2H, ... (a view as (B, S, D_h, H)); head h owns the contiguous block of features h·D_h to (h+1)·D_h - 1: view as (B, S, H, D_h).",
           _variant(_MHA, "MultiHeadAttention", split_heads=_split_interleaved)),
    Mutant("missing_transpose", "split_heads returned (B, S, H, D_h): transpose(1, 2) to put the heads before the positions, (B, H, S, D_h).",
           _variant(_MHA, "MultiHeadAttention", split_heads=_split_no_transpose)),
    Mutant("heads_folded_into_batch", "split_heads returned (B·H, S, D_h): keep batch and heads as separate dims, (B, H, S, D_h).",
           _variant(_MHA, "MultiHeadAttention", split_heads=_split_into_batch)),
]


def _merge_interleaved(self, x):
    B, H, S, D_h = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, S, D_h * H)


def _merge_mean(self, x):
    return x.mean(dim=1)


MERGE_MUTANTS = [
    Mutant("view_without_transpose", "merge_heads reshaped (B, H, S, D_h) directly to (B, S, d_model): transpose(1, 2) to (B, S, H, D_h) first, then reshape (contiguous() before view).",
           _variant(_MHA, "MultiHeadAttention", merge_heads=_merge_view_no_transpose)),
    Mutant("interleaved_heads", "merge_heads interleaved the heads' features (a permute to (B, S, D_h, H)): head h must fill the contiguous block h·D_h to (h+1)·D_h - 1, i.e. transpose to (B, S, H, D_h).",
           _variant(_MHA, "MultiHeadAttention", merge_heads=_merge_interleaved)),
    Mutant("averaged_heads", "merge_heads averaged the heads, (B, S, D_h); concatenate them instead: (B, S, H·D_h) = (B, S, d_model).",
           _variant(_MHA, "MultiHeadAttention", merge_heads=_merge_mean)),
]

check_split_heads = register(Exercise(
    name="split_heads",
    reference=ref.MultiHeadAttention,
    make_cases=lambda seed: _head_cases(seed, "split"),
    kind="class",
    run=_run_method("split_heads"),
    mutants=SPLIT_MUTANTS,
))
check_merge_heads = register(Exercise(
    name="merge_heads",
    reference=ref.MultiHeadAttention,
    make_cases=lambda seed: _head_cases(seed, "merge"),
    kind="class",
    run=_run_method("merge_heads"),
    mutants=MERGE_MUTANTS,
))
