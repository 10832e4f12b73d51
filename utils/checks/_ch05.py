"""Checks for chapter 05 — self-attention and multi-head attention.

The cases are built without the reference (the grader re-builds them in a process that has none):
the parameters are drawn by name from the layouts the contracts state, and loaded into the
learner's module, so any parameter-creation order gives the same module.
"""
import math
from dataclasses import replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import reference as ref
from ._contract import Contract
from ._contract import Dropout, raises_somewhere
from ._core import Case, Exercise, Mutant, Variant, build_module, generator, layout_judge, parameter_layout, randn, rng
from ._forbid import MHA, SDPA
from ._guards import STATE, dropout_hint
from ._registry import register
from ._ch03 import DROPOUT_SHARED_OVER_BATCH, DROPOUT_WHOLE_COLUMNS, DROPOUT_WHOLE_ROWS, _agreement, _dispersion

__all__ = [
    "check_SelfAttention",
    "check_MultiHeadAttention",
    "check_split_heads",
    "check_merge_heads",
]

F64 = torch.float64
NEG_INF = float("-inf")


def random_state(layout, g: torch.Generator) -> dict:
    """Random parameters by name: N(0, 1/fan_in) weights, N(0, 0.1²) biases.

    ``layout``: {name: shape}, or a module whose state_dict gives it (chapter 06 passes one).
    Drawn from ``g`` (not from the module's own init), so the learner's module gets exactly these
    parameters whatever order it creates them in.
    """
    if isinstance(layout, nn.Module):
        layout = {name: tuple(t.shape) for name, t in layout.state_dict().items()}
    state = {}
    for name, shape in layout.items():
        scale = 1.0 / math.sqrt(shape[-1]) if len(shape) == 2 else 0.1
        state[name] = randn(*shape, gen=g, scale=scale)
    return state


def _f64(state: dict) -> dict:
    return {k: v.to(F64) for k, v in state.items()}


def _hide_best(scores: torch.Tensor) -> torch.Tensor:
    """A mask (…, S_q, S_k) that hides the key with the largest score of every row."""
    best = scores.argmax(dim=-1, keepdim=True)
    return torch.ones(scores.shape, dtype=torch.bool).scatter(-1, best, False)


# ---------------------------------------------------------------- SelfAttention
def _sa_layout(d_model: int, d_k=None, d_v=None) -> dict:
    d_k = d_model if d_k is None else d_k
    d_v = d_k if d_v is None else d_v
    return {"W_q.weight": (d_k, d_model), "W_k.weight": (d_k, d_model), "W_v.weight": (d_v, d_model)}


SA_BIAS_HINT = "the projections have biases: create W_q, W_k and W_v with bias=False, as the exercise states."
SA_NAMES_HINT = ("use the attribute names the exercise gives: self.W_q, self.W_k and self.W_v, each an nn.Linear, "
                 "and no other parameters (the check loads its weights into them by name).")
SA_SHAPES_HINT = ("d_k defaults to d_model and d_v to d_k (not to d_model): W_q, W_k = nn.Linear(d_model, d_k), "
                  "W_v = nn.Linear(d_model, d_v); nn.Linear(in, out) stores a weight of shape (out, in).")
SA_HINTS = {"bias": SA_BIAS_HINT, "no_bias": SA_NAMES_HINT, "names": SA_NAMES_HINT, "shapes": SA_SHAPES_HINT}


def _sa_scores(state: dict, x: torch.Tensor) -> torch.Tensor:
    q, k = x @ state["W_q.weight"].T.to(x.dtype), x @ state["W_k.weight"].T.to(x.dtype)
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def _sa_case_scores(case: Case) -> torch.Tensor:
    return _sa_scores(case.init["state"], case.args[0].float())


def _self_attention_cases(seed: int) -> list:
    """Parameter layout, typical sizes and masks, gradients (float64, fully masked row), edges."""
    r, g = rng(seed), generator(seed)
    cases = []
    for ctor in ((8, 4), (6, 4, 5)):
        cases.append(Case(f"the parameters of SelfAttention{ctor}: names and shapes", init={"ctor": ctor, "seed": seed},
                          run=parameter_layout, judge=layout_judge(f"SelfAttention{ctor}", _sa_layout(*ctor), SA_HINTS)))

    def add(label, B, S, d_model, d_k=None, d_v=None, mask=None, scale=1.0, grad=False, hide_best=False):
        kwargs = {k: v for k, v in (("d_k", d_k), ("d_v", d_v)) if v is not None}
        state = random_state(_sa_layout(d_model, d_k, d_v), g)
        x = randn(B, S, d_model, gen=g, scale=scale)
        if hide_best:
            mask = _hide_best(_sa_scores(state, x))
        if grad:
            x, state = x.to(F64), _f64(state)
        dims = f"x {tuple(x.shape)}, SelfAttention({d_model}" + "".join(f", {k}={v}" for k, v in kwargs.items()) + ")"
        if mask is not None:
            dims += f", mask {tuple(mask.shape)}"
        if grad:
            label = f"gradients (float64) for x, W_q, W_k, W_v, {label}"
        init = {"ctor": (d_model,), "ctor_kwargs": kwargs, "seed": seed, "state": state}
        cases.append(Case(f"{label}: {dims}", (x,), {"mask": mask} if mask is not None else {}, init=init, grad=grad))

    add("d_k < d_model, d_v defaults to d_k", 2, 5, 8, d_k=4)
    add("d_k ≠ d_v ≠ d_model", 3, 4, 6, d_k=4, d_v=5)
    add("d_k = d_v = d_model", 2, 5, 8)
    add("causal mask (S, S)", 2, 6, 8, d_k=4, mask=torch.ones(6, 6, dtype=torch.bool).tril())
    kp = torch.ones(3, 1, 5, dtype=torch.bool)
    kp[1, :, 3:] = False
    add("key padding mask (B, 1, S)", 3, 5, 8, d_k=6, mask=kp)
    add("no mask", 2, 4, 6, d_k=3, d_v=5, grad=True)
    gm = torch.rand(2, 5, 5, generator=g) > 0.4
    gm[..., 0] = True
    gm[0, 2] = False  # a fully masked query row
    gm[1, 3, :3] = False  # a row whose leading keys are masked
    add("a fully masked row and leading masked keys", 2, 5, 6, d_k=4, d_v=3, mask=gm, grad=True)
    add("d_v given, d_k defaults to d_model", 1, 5, 5, d_v=3)
    add("a single position (S = 1)", 2, 1, 6, d_k=3)
    m = torch.rand(2, 5, 5, generator=g) > 0.4
    m[..., 0] = True
    m[0, 2] = False
    add("mask (B, S, S) with a fully masked query row", 2, 5, 7, d_k=5, d_v=3, mask=m)
    lead = torch.ones(6, 6, dtype=torch.bool)
    lead[:, :3] = False
    add("the first 3 keys masked in every row", 2, 6, 6, d_k=4, mask=lead)
    add("the key with the largest score is masked in every row", 2, 5, 8, d_k=4, scale=3.0, hide_best=True)
    add("large-magnitude inputs", 2, 6, 16, d_k=8, scale=6.0)
    for i in range(4):  # random shapes, odd sizes included
        B, S, d_model = r.randint(1, 3), r.randint(1, 9), r.choice([3, 5, 8, 12])
        d_k = r.choice([None, 2, 4, 7])
        d_v = r.choice([None, 1, 3, 6])
        mask = None
        if i % 2:
            mask = torch.rand(B, S, S, generator=g) > 0.4
            mask[..., 0] = True
        add(f"random case {i + 1}", B, S, d_model, d_k, d_v, mask=mask)
    return cases


def _sa_rescale(case: Case, c: float) -> Case:
    """The same case with every score multiplied by c (W_q scaled by c)."""
    if "state" not in case.init:
        return case
    state = dict(case.init["state"])
    state["W_q.weight"] = state["W_q.weight"] * c
    return replace(case, init={**case.init, "state": state})


def _sa_scale_names(case: Case) -> dict:
    state = case.init.get("state", {})
    d_k, d_model = state["W_q.weight"].shape if state else (1, 1)
    d_v = state["W_v.weight"].shape[0] if state else 1
    S = case.args[0].size(1) if case.args else 1
    return {"1/sqrt(d_k)": 1 / math.sqrt(d_k), "1 (no scaling)": 1.0, "1/sqrt(d_model)": 1 / math.sqrt(d_model),
            "1/d_k": 1 / d_k, "1/sqrt(d_v)": 1 / math.sqrt(d_v), "1/sqrt(q.size(1)) = 1/sqrt(S)": 1 / math.sqrt(S),
            "sqrt(d_k)": math.sqrt(d_k)}


class _SelfAttentionMistake(nn.Module):
    """Self-attention written plainly, with one knob turned; each subclass below is one known mistake."""

    scale_by = "d_k"
    softmax_dim = -1
    mask_mode = "before"  # "before" the softmax (correct), "after" it, "ignored", "additive"
    bias = False
    d_v_default = "d_k"
    project_v = True
    inplace_fix = False
    batched_T = False

    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_model if d_k is None else d_k
        d_v = (d_k if self.d_v_default == "d_k" else d_model) if d_v is None else d_v
        self.d_k, self.d_v, self.d_model = d_k, d_v, d_model
        self.W_q = nn.Linear(d_model, d_k, bias=self.bias)
        self.W_k = nn.Linear(d_model, d_k, bias=self.bias)
        self.W_v = nn.Linear(d_model, d_v, bias=self.bias)

    def forward(self, x, mask=None):
        q, k = self.W_q(x), self.W_k(x)
        v = self.W_v(x) if self.project_v else x
        d = {"d_k": self.d_k, "d_model": self.d_model, "d_v": self.d_v, "none": 1, "size1": q.size(1)}[self.scale_by]
        kt = k.T if self.batched_T else k.transpose(-2, -1)
        scores = q @ kt / math.sqrt(d)
        if mask is not None and self.mask_mode == "before":
            scores = scores.masked_fill(~mask, NEG_INF)
        if mask is not None and self.mask_mode == "neg_1e9":
            scores = scores.masked_fill(~mask, -1e9)
        if mask is not None and self.mask_mode == "additive":
            scores = scores + torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, NEG_INF)
        w = torch.softmax(scores, dim=self.softmax_dim)
        if self.inplace_fix:
            w[w.isnan()] = 0.0
        else:
            w = w.nan_to_num(0.0)
        if mask is not None and self.mask_mode == "after":
            w = w * mask
        return w @ v, w


def _variant(base, name, **attrs):
    return type(name, (base,), attrs)


def _sa(**attrs):
    return _variant(_SelfAttentionMistake, "SelfAttention", **attrs)


INPLACE_HINT = ("an in-place edit of the softmax's output (such as `w[w.isnan()] = 0`) gives the right forward "
                "values but breaks autograd, which needs that output for the backward pass: build a new tensor "
                "instead (torch.where(..., 0.0, w) or w.nan_to_num(0.0)).")
ADDITIVE_HINT = ("the mask was added as a -inf bias (scores + bias): in a fully masked row the softmax's NaN then "
                 "flows back through the addition into the gradients. Fill the masked scores with masked_fill or "
                 "torch.where, which sends no gradient to them.")
BATCHED_T_HINT = ("`.T` reverses *every* dimension of a batched tensor (a (B, S, D) key becomes (D, S, B)); "
                  "swap only the last two with k.transpose(-2, -1).")
WRONG_DIM_HINT = ("the softmax was taken over the query dim (-2) instead of the key dim (-1): each row of weights "
                  "must sum to 1.")
NEG_1E9_HINT = ("a fully masked query row got uniform weights (1/S_k each) and a nonzero output: filling the masked "
                "scores with -1e9 (or any large negative number) makes every score of that row equal. Fill with "
                "-inf and turn the NaN rows into zeros (masked_fill(~mask, 0.0) or nan_to_num after the softmax).")
MASK_AFTER_HINT = ("the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the "
                   "scores with -inf before the softmax.")

# Diagnosis order: gradient-only mistakes, then crashes, then the rest (see MHA_MUTANTS below);
# the parameter-layout mistakes, named by the judged first cases, last.
SELF_ATTENTION_MUTANTS = [
    Mutant("inplace_nan_fix", INPLACE_HINT, _sa(inplace_fix=True)),
    Mutant("additive_inf_bias", ADDITIVE_HINT, _sa(mask_mode="additive")),
    Mutant("batched_T", BATCHED_T_HINT, _sa(batched_T=True)),
    Mutant("no_scaling", "the scores were not divided by sqrt(d_k).", _sa(scale_by="none")),
    Mutant("scale_by_sqrt_d_model", "the scores were divided by sqrt(d_model) instead of sqrt(d_k), the size of the projected q and k.",
           _sa(scale_by="d_model")),
    Mutant("scale_by_sqrt_d_v", "the scores were divided by sqrt(d_v) (the size of v) instead of sqrt(d_k) (the size of q and k).",
           _sa(scale_by="d_v")),
    Mutant("scale_by_q_size_1", "the scores were divided by sqrt(q.size(1)), which is S (the number of positions) for q (B, S, d_k): the scale is 1/sqrt(q.size(-1)) = 1/sqrt(d_k).",
           _sa(scale_by="size1")),
    Mutant("softmax_wrong_dim", WRONG_DIM_HINT, _sa(softmax_dim=-2)),
    Mutant("mask_ignored", "the mask was ignored: fill the scores with -inf where the mask is False, before the softmax.",
           _sa(mask_mode="ignored")),
    Mutant("mask_after_softmax", MASK_AFTER_HINT, _sa(mask_mode="after")),
    Mutant("values_not_projected", "the weights were applied to x itself: the values are W_v(x), out = weights @ W_v(x).",
           _sa(project_v=False)),
    Mutant("neg_1e9_fully_masked", NEG_1E9_HINT, _sa(mask_mode="neg_1e9")),
    Mutant("with_bias", SA_BIAS_HINT, _sa(bias=True)),
    Mutant("d_v_defaults_to_d_model", SA_SHAPES_HINT, _sa(d_v_default="d_model")),
]


class _VSelfAttentionEinsum(nn.Module):
    """W_v created first, then W_k, then W_q; einsum; torch.where for the mask; assert on the sizes."""

    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_k or d_model
        d_v = d_v or d_k
        assert d_model > 0 and d_k > 0 and d_v > 0  # an assert instead of ValueError is fine
        self.W_v = nn.Linear(d_model, d_v, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_q = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        scores = torch.einsum("bid,bjd->bij", q, k) * q.shape[-1] ** -0.5  # (B, S, S)
        if mask is not None:
            scores = torch.where(mask, scores, torch.tensor(NEG_INF, dtype=scores.dtype))
        w = torch.softmax(scores, dim=-1)
        w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
        return torch.einsum("bij,bjd->bid", w, v), w


class _VSelfAttentionFloat64Loops(nn.Module):
    """Float64 inside, F.linear on the weights, a hand-written softmax, a loop over the batch."""

    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        self.d_k = d_model if d_k is None else d_k
        d_v = self.d_k if d_v is None else d_v
        self.W_k = nn.Linear(d_model, self.d_k, bias=False)
        self.W_q = nn.Linear(d_model, self.d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_v, bias=False)

    def forward(self, x, mask=None):
        B, S, _ = x.shape
        full = torch.ones(B, S, S, dtype=torch.bool) if mask is None else mask.expand(B, S, S)
        outs, ws = [], []
        for b in range(B):
            xb = x[b].double()  # (S, d_model)
            q = F.linear(xb, self.W_q.weight.double())
            k = F.linear(xb, self.W_k.weight.double())
            v = F.linear(xb, self.W_v.weight.double())
            s = (q @ k.t()) / math.sqrt(self.d_k)  # (S, S)
            s = s.masked_fill(~full[b], NEG_INF)
            m = s.amax(dim=-1, keepdim=True)
            e = torch.exp(s - torch.where(torch.isinf(m), torch.zeros_like(m), m))
            w = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-300)
            outs.append(w @ v)
            ws.append(w)
        return torch.stack(outs).to(x.dtype), torch.stack(ws).to(x.dtype)


SELF_ATTENTION_EXERCISE = Exercise(
    name="SelfAttention",
    reference=ref.SelfAttention,
    make_cases=_self_attention_cases,
    kind="class",
    mutants=SELF_ATTENTION_MUTANTS,
    variants=[Variant("other_parameter_order_einsum_assert", _VSelfAttentionEinsum),
              Variant("float64_loops_over_batch", _VSelfAttentionFloat64Loops, demo=True)],
    output_names=("out", "weights"),
    input_names=("x",),
    rescale=_sa_rescale,
    scale_names=_sa_scale_names,
    contract=Contract("""Single-head self-attention: out = softmax(q kᵀ / sqrt(d_k)) v, q, k, v linear maps of x.

    Parameters (the check loads its weights into them by name; no other parameters):
        W_q, W_k: nn.Linear(d_model, d_k, bias=False)   W_v: nn.Linear(d_model, d_v, bias=False)
        d_k defaults to d_model, d_v defaults to d_k. No output projection.
    forward(x, mask=None):
        x: (B, S, d_model)   mask: bool, broadcastable to (B, S, S), True = may attend; or None
        returns out (B, S, d_v) and weights (B, S, S); a fully masked query row gets zero
        weights and a zero output.
    """, forbid=(SDPA, MHA), grad="x, W_q, W_k and W_v (fully masked rows included)", kinds={"x": "tokens", "mask": "mask"}, scores=_sa_case_scores),
)
check_SelfAttention = register(SELF_ATTENTION_EXERCISE)


# ---------------------------------------------------------------- MultiHeadAttention
def _mha_layout(d_model: int, bias: bool = True) -> dict:
    layout = {}
    for n in "qkvo":
        layout[f"W_{n}.weight"] = (d_model, d_model)
        if bias:
            layout[f"W_{n}.bias"] = (d_model,)
    return layout


MHA_BIAS_HINT = ("`bias` was ignored: with bias=False, create W_q, W_k, W_v and W_o as nn.Linear(d_model, d_model, "
                 "bias=bias), with no bias.")
MHA_NO_BIAS_HINT = "the projections have no bias: with bias=True (the default), nn.Linear(d_model, d_model, bias=bias) has one."
MHA_NAMES_HINT = ("use the attribute names the exercise gives: self.W_q, self.W_k, self.W_v and self.W_o, each an "
                  "nn.Linear(d_model, d_model), and no other parameters (the check loads its weights by name).")
MHA_HINTS = {"bias": MHA_BIAS_HINT, "no_bias": MHA_NO_BIAS_HINT, "names": MHA_NAMES_HINT, "shapes": MHA_NAMES_HINT}


def _mha_scores_by_hand(state: dict, query, key, H: int) -> torch.Tensor:
    """Per-head scores (B, H, S_q, S_k), written out here (no reference in the grader's re-run)."""
    def proj(x, n):
        y = x @ state[f"W_{n}.weight"].T
        return y + state[f"W_{n}.bias"] if f"W_{n}.bias" in state else y

    def split(t):
        B, S, D = t.shape
        return t.view(B, S, H, D // H).transpose(1, 2)

    q, k = split(proj(query, "q")), split(proj(key, "k"))
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


# Training-mode dropout probe: W_q = W_k = 0 (uniform weights 1/S_k), W_v = W_o = I, value = 1,
# so out[b, i, head h's block] = the row sum of head h's dropped weights.
_DROP_B, _DROP_S, _DROP_D, _DROP_H = 2, 32, 4, 2


def _dropout_probe_state() -> dict:
    d = _DROP_D
    return {"W_q.weight": torch.zeros(d, d), "W_q.bias": torch.zeros(d), "W_k.weight": torch.zeros(d, d),
            "W_k.bias": torch.zeros(d), "W_v.weight": torch.eye(d), "W_v.bias": torch.zeros(d),
            "W_o.weight": torch.eye(d), "W_o.bias": torch.zeros(d)}


DROPOUT_IGNORED = ("in training mode no attention weight was dropped: apply nn.Dropout(dropout) to "
                   "the weights (after the softmax, before weights @ v).")
DROPOUT_NOT_RESCALED = "dropout zeroed weights but did not rescale the kept ones by 1/(1 - dropout): nn.Dropout does both."
DROPOUT_ON_OUTPUT = ("dropout was applied to the output, not to the attention weights: drop entries of the weights "
                     "and compute out from the dropped weights.")
DROPOUT_NOT_RETURNED = ("the returned weights are the ones before dropout, but out was computed from the dropped "
                        "ones: return the dropped weights, so that out is exactly what they produce.")


def _mha_dropout_probe(p: float, seed: int) -> Case:
    ones = torch.ones(_DROP_B, _DROP_S, _DROP_D)
    return Case(f"query = key = value = ones {tuple(ones.shape)}, MultiHeadAttention({_DROP_D}, num_heads={_DROP_H}, "
                f"dropout={p:g}) with W_q = W_k = 0 (uniform weights), W_v = W_o = I", (ones, ones, ones),
                init={"ctor": (_DROP_D, _DROP_H), "ctor_kwargs": {"dropout": p}, "seed": seed,
                      "state": _dropout_probe_state()})


def _mha_dropout_consistent(case: Case, got) -> str | None:
    """With W_v = W_o = I and value = ones, out[b, i, head h's block] is head h's row sum of the weights."""
    B, S, D, H = _DROP_B, _DROP_S, _DROP_D, _DROP_H
    out, w = (t.detach().double() for t in got)
    if tuple(out.shape) != (B, S, D):
        return f"out should have shape {(B, S, D)}, got {tuple(out.shape)}."
    sums = w.sum(-1).transpose(1, 2).repeat_interleave(D // H, dim=-1)  # (B, S, D): head h's row sums
    if torch.allclose(out, sums, atol=1e-4, rtol=1e-4):
        return _mha_dropout_independent(w)
    if bool((w != 0).all()):  # the returned weights were not dropped, yet out differs
        blocks = out.view(B, S, H, D // H)
        constant = bool(torch.allclose(blocks, blocks[..., :1].expand_as(blocks), atol=1e-6))
        return f"out does not match the returned weights. Likely mistake: {DROPOUT_NOT_RETURNED if constant else DROPOUT_ON_OUTPUT}"
    return "out is not what the returned weights produce (weights @ v, heads merged, W_o)."


DROPOUT_SHARED_OVER_HEADS = ("one dropout mask was shared by the heads: each head's weights are dropped independently, "
                             "one draw per weight of the (B, H, S_q, S_k) weights (nn.Dropout on the weights does it).")


def _mha_dropout_independent(w: torch.Tensor) -> str | None:
    """Each weight of the (B, H, S, S) weights dropped on its own: not shared by the heads or the batch
    entries, nor kept or dropped by whole query rows or key columns (the judges of chapter 03)."""
    keep = w != 0
    if keep.dim() != 4 or not 0.02 < 1 - float(keep.double().mean()) < 0.98:
        return None
    for a, b, what, hint in ((keep[:, 0], keep[:, 1], "heads", DROPOUT_SHARED_OVER_HEADS),
                             (keep[0], keep[1], "batch entries", DROPOUT_SHARED_OVER_BATCH)):
        seen = _agreement(a, b)
        if seen:
            return f"the two {what} kept the same weights at {seen} of the positions. Likely mistake: {hint}"
    for dim, hint, what in ((-1, DROPOUT_WHOLE_ROWS, "query row"), (-2, DROPOUT_WHOLE_COLUMNS, "key column")):
        ratio = _dispersion(keep, dim)
        if ratio is not None and ratio > 2.5:
            return (f"the share dropped per {what} varies {ratio:.0f} times as much as independent draws allow. "
                    f"Likely mistake: {hint}")
    return None


MHA_DROPOUT = Dropout(on="each attention weight, independently (of the other weights, heads and batch entries)",
                      ctor="dropout", probe=_mha_dropout_probe,
                      values=lambda case, got: got[1], consistent=_mha_dropout_consistent,
                      hints={"ignored": DROPOUT_IGNORED, "not_rescaled": DROPOUT_NOT_RESCALED})


def _mha_cases(seed: int) -> list:
    """Parameter layout, typical attention, masks, gradients (float64), edges, training dropout."""
    r, g = rng(seed), generator(seed)
    cases = []
    for ctor, bias in (((12, 3), True), ((8, 2, 0.0, False), False)):
        cases.append(Case(f"the parameters of MultiHeadAttention{ctor}: names and shapes",
                          init={"ctor": ctor, "seed": seed}, run=parameter_layout,
                          judge=layout_judge(f"MultiHeadAttention{ctor}", _mha_layout(ctor[0], bias), MHA_HINTS)))

    def add(label, B, s_q, s_k, d_model, H, mask=None, dropout=0.0, bias=True, kind="cross", scale=1.0,
            grad=False, hide_best=False):
        state = random_state(_mha_layout(d_model, bias), g)
        query = randn(B, s_q, d_model, gen=g, scale=scale)
        if kind == "self":  # self-attention: query, key and value are the same tensor
            key = value = query
        elif kind == "memory":  # cross-attention over one memory: key is value
            key = value = randn(B, s_k, d_model, gen=g, scale=scale)
        else:  # key and value differ
            key = randn(B, s_k, d_model, gen=g, scale=scale)
            value = randn(B, s_k, d_model, gen=g)
        if hide_best:  # hide the key with the largest score (over the heads) of every query
            mask = _hide_best(_mha_scores_by_hand(state, query, key, H).amax(dim=1, keepdim=True))
        if grad:
            query, key, value, state = query.to(F64), key.to(F64), value.to(F64), _f64(state)
            label = f"gradients (float64) for query, key, value and every parameter, {label}"
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
        init = {"ctor": (d_model, H), "ctor_kwargs": ctor_kwargs, "seed": seed, "state": state}
        cases.append(Case(f"{label}: {dims}", (query, key, value), {"mask": mask} if mask is not None else {},
                          init=init, grad=grad))

    add("self-attention", 2, 5, 5, 8, 2, kind="self")
    add("one query, many keys (a decoding step)", 3, 1, 5, 6, 2)
    add("cross-attention, S_q ≠ S_k, key = value", 2, 3, 6, 8, 2, kind="memory")
    add("cross-attention, key ≠ value", 2, 4, 7, 12, 3)
    add("key padding mask (B, 1, 1, S_k)", 3, 4, 6, 8, 2, mask=_key_padding(3, 6, g))
    add("causal mask (S, S) over (B, H)", 2, 6, 6, 8, 4, mask=torch.ones(6, 6, dtype=torch.bool).tril(), kind="self")
    add("dropout=0.3 in eval mode (model.eval())", 2, 5, 4, 8, 2, dropout=0.3)
    add("bias=False", 2, 4, 6, 8, 2, bias=False)
    add("no mask", 2, 3, 4, 6, 2, grad=True)
    gm = torch.rand(2, 1, 4, 5, generator=g) > 0.4
    gm[..., 0] = True
    gm[0, 0, 1] = False  # a fully masked query row
    gm[1, 0, 2, :3] = False  # a row whose leading keys are masked
    add("a fully masked row and leading masked keys", 2, 4, 5, 6, 3, mask=gm, grad=True)
    add("one query, one key (S = 1)", 2, 1, 1, 8, 4)
    add("a single head (H = 1)", 2, 4, 5, 6, 1)
    add("heads of size 1 (D_h = 1)", 2, 5, 3, 4, 4)
    add("odd sizes, D_h = 3, S = H", 1, 5, 5, 15, 5, kind="self")
    m = torch.rand(2, 1, 5, 7, generator=g) > 0.4
    m[..., 0] = True
    m[0, 0, 2] = False
    add("mask (B, 1, S_q, S_k) with a fully masked query row", 2, 5, 7, 12, 3, mask=m)
    lead = torch.ones(4, 6, dtype=torch.bool)
    lead[:, :4] = False
    add("the first 4 keys masked in every row", 2, 4, 6, 8, 2, mask=lead)
    add("the key with the largest score is masked for every query", 2, 4, 5, 8, 2, scale=3.0, hide_best=True)
    add("large-magnitude inputs", 2, 5, 6, 16, 4, scale=4.0)
    add("a sequence that is all padding", 3, 3, 5, 8, 2, mask=_key_padding(3, 5, g, pad_all=True), kind="memory")
    for i in range(2):  # random shapes, odd sizes included
        H, d_h = r.choice([1, 2, 3, 4]), r.choice([1, 2, 3, 5])
        B, s_q, s_k = r.randint(1, 3), r.randint(1, 7), r.randint(1, 7)
        mask = _key_padding(B, s_k, g) if i % 2 else None
        add(f"random case {i + 1}", B, s_q, s_k, H * d_h, H, mask=mask)
    return cases


def _key_padding(batch: int, s_k: int, g: torch.Generator, pad_all: bool = False) -> torch.Tensor:
    """(B, 1, 1, S_k) bool, True = real token; each row keeps >= 1 key unless ``pad_all``."""
    lengths = torch.randint(1, s_k + 1, (batch,), generator=g)
    lengths[0] = max(1, s_k - 2)
    mask = torch.arange(s_k)[None, :] < lengths[:, None]  # (B, S_k)
    if pad_all:
        mask[-1] = False  # the last sequence is all padding: its rows are fully masked
    return mask[:, None, None, :]


def _mha_case_scores(case: Case) -> torch.Tensor:
    """Per-head scores (B, H, S_q, S_k) of a case (no reference needed)."""
    H = case.init["ctor"][1]
    state = {k: v.double() for k, v in case.init["state"].items()}
    return _mha_scores_by_hand(state, case.args[0].double(), case.args[1].double(), H)


def _mha_rescale(case: Case, c: float) -> Case:
    """The same case with every score multiplied by c (W_q's weight and bias scaled by c)."""
    if "state" not in case.init:
        return case
    state = dict(case.init["state"])
    for name in ("W_q.weight", "W_q.bias"):
        if name in state:
            state[name] = state[name] * c
    return replace(case, init={**case.init, "state": state})


def _mha_scale_names(case: Case) -> dict:
    d_model, H = case.init.get("ctor", (1, 1))[:2]
    d_h = d_model // H
    s_k = case.args[1].size(1) if len(case.args) > 1 else 1
    return {"1/sqrt(D_h)": 1 / math.sqrt(d_h), "1 (no scaling)": 1.0, "1/sqrt(d_model)": 1 / math.sqrt(d_model),
            "1/D_h": 1 / d_h, "1/sqrt(num_heads) (q.size(1))": 1 / math.sqrt(H), "1/sqrt(S_k)": 1 / math.sqrt(s_k),
            "sqrt(D_h)": math.sqrt(d_h)}


class _MHAMistake(nn.Module):
    """Multi-head attention written plainly, with one knob turned; each subclass is one known mistake."""

    scale_by = "d_head"
    softmax_dim = -1
    mask_mode = "before"
    use_W_o = True
    swap_qk_projections = False
    value_from_key = False
    average_heads = False
    dropout_mode = "weights"  # "weights" (correct), "always", "ignored", "not_rescaled", "output", "not_returned"
    bias_ignored = False
    inplace_fix = False
    split_mode = "ok"  # "ok", "view_no_transpose" (view to (B, H, S, D_h)), "no_transpose" (both split and merge)
    merge_mode = "ok"  # "ok", "view_no_transpose", "view_not_contiguous"
    mask_unsqueezed = False
    project_v = True
    heads_reversed = False

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        bias = True if self.bias_ignored else bias
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def split_heads(self, x):
        B, S, _ = x.shape
        if self.split_mode == "view_no_transpose":
            return x.view(B, self.num_heads, S, self.d_head)
        x = x.view(B, S, self.num_heads, self.d_head)
        return x if self.split_mode == "no_transpose" else x.transpose(1, 2)

    def merge_heads(self, x):
        if self.split_mode == "no_transpose":
            B, S, H, D_h = x.shape
            return x.reshape(B, S, H * D_h)
        B, H, S, D_h = x.shape
        if self.merge_mode == "view_no_transpose":
            return x.reshape(B, S, H * D_h)
        if self.merge_mode == "view_not_contiguous":
            return x.transpose(1, 2).view(B, S, H * D_h)
        return x.transpose(1, 2).reshape(B, S, H * D_h)

    def forward(self, query, key, value, mask=None):
        W_q, W_k = (self.W_k, self.W_q) if self.swap_qk_projections else (self.W_q, self.W_k)
        q = self.split_heads(W_q(query))
        k = self.split_heads(W_k(key))
        v_in = key if self.value_from_key else value
        v = self.split_heads(self.W_v(v_in) if self.project_v else v_in)
        d = {"d_head": self.d_head, "d_model": self.d_model, "none": 1, "size1": q.size(1)}[self.scale_by]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        if mask is not None and self.mask_unsqueezed:
            mask = mask.unsqueeze(1)
        if mask is not None and self.mask_mode == "before":
            scores = scores.masked_fill(~mask, NEG_INF)
        if mask is not None and self.mask_mode == "neg_1e9":
            scores = scores.masked_fill(~mask, -1e9)
        if mask is not None and self.mask_mode == "additive":
            scores = scores + torch.zeros(mask.shape, dtype=scores.dtype).masked_fill(~mask, NEG_INF)
        w = torch.softmax(scores, dim=self.softmax_dim)
        if self.inplace_fix:
            w[w.isnan()] = 0.0
        else:
            w = w.nan_to_num(0.0)
        if mask is not None and self.mask_mode == "after":
            w = w * mask
        p = self.dropout.p
        returned = w
        if self.dropout_mode == "weights":
            w = returned = self.dropout(w)
        elif self.dropout_mode == "always":
            w = returned = F.dropout(w, p, training=True)
        elif self.dropout_mode == "keep":
            w = returned = F.dropout(w, 1 - p, training=self.training) * ((1 - p) / p if p > 0 else 1.0)
        elif self.dropout_mode == "not_rescaled" and self.training and p > 0:
            w = returned = w * (torch.rand_like(w) >= p)
        elif self.dropout_mode == "not_returned":
            w = self.dropout(w)
        elif self.dropout_mode == "shared_heads" and self.training and p > 0:
            keep = torch.rand(w.shape[0], 1, *w.shape[2:]) >= p  # one mask for every head
            w = returned = w * keep / (1 - p)
        heads = w @ v  # (B, H, S_q, D_h)
        out = self.merge_heads(heads.flip(1) if self.heads_reversed else heads)
        if self.use_W_o:
            out = self.W_o(out)
        if self.dropout_mode == "output":
            out = self.dropout(out)
        return out, (returned.mean(dim=1) if self.average_heads else returned)


def _mha(**attrs):
    return _variant(_MHAMistake, "MultiHeadAttention", **attrs)


class _MHAKeepsKeys(_MHAMistake):
    """Keeps the keys and values of every call (a KV cache inside the module) and attends to all of them."""

    def forward(self, query, key, value, mask=None):
        if getattr(self, "_kept", None) is not None and self._kept[0].shape[0] == key.shape[0] and mask is None:
            key, value = torch.cat([self._kept[0], key], 1), torch.cat([self._kept[1], value], 1)
        self._kept = (key.detach(), value.detach())
        return super().forward(query, key, value, mask)


VIEW_NO_TRANSPOSE_HINT = ("heads were mixed up in split_heads: a direct view of (B, S, d_model) as (B, H, S, D_h) "
                          "scrambles positions and features; view it as (B, S, H, D_h), then transpose(1, 2).")
NO_TRANSPOSE_HINT = ("the heads were split with a view to (B, S, H, D_h) but never transposed, so attention ran "
                     "across the heads of each position instead of across positions: transpose(1, 2) to "
                     "(B, H, S, D_h) after the view (and back before merging).")

# Diagnosis order (it stops after 1.5 s): mistakes seen only in the gradient cases first (against
# any other answer they differ at once), then those that crash on most cases (against a crashing
# answer every other mutant runs on until a case where the answer ran), then by how often learners
# make them; the mistakes a judged case names (bias ignored, dropout) last: no diagnosis needed.
MHA_MUTANTS = [
    Mutant("inplace_nan_fix", INPLACE_HINT, _mha(inplace_fix=True)),
    Mutant("additive_inf_bias", ADDITIVE_HINT, _mha(mask_mode="additive")),
    Mutant("view_of_non_contiguous_merge", "merge_heads called .view on a transposed (non-contiguous) tensor: use .contiguous().view(...) or .reshape(...) after transpose(1, 2).",
           _mha(merge_mode="view_not_contiguous")),
    Mutant("split_without_transpose", NO_TRANSPOSE_HINT, _mha(split_mode="no_transpose")),
    Mutant("view_without_transpose_in_split", VIEW_NO_TRANSPOSE_HINT, _mha(split_mode="view_no_transpose")),
    Mutant("heads_mixed_in_merge", "heads were mixed up in merge_heads: transpose (B, H, S, D_h) to (B, S, H, D_h) first, then reshape to (B, S, d_model); a direct view scrambles positions and heads.",
           _mha(merge_mode="view_no_transpose")),
    Mutant("mask_unsqueezed", "the mask was unsqueezed at dim 1: it is already broadcastable to (B, H, S_q, S_k) (e.g. (S_q, S_k) or (B, 1, 1, S_k)); use it as given.",
           _mha(mask_unsqueezed=True)),
    Mutant("no_scaling", "the scores were not divided by sqrt(D_h), the head size.", _mha(scale_by="none")),
    Mutant("scale_by_sqrt_d_model", "the scores were divided by sqrt(d_model) instead of sqrt(D_h) = sqrt(d_model / num_heads): each head's q·k is a sum over D_h terms.",
           _mha(scale_by="d_model")),
    Mutant("scale_by_q_size_1", "the scores were divided by sqrt(q.size(1)), which is num_heads for q (B, H, S, D_h): the scale is 1/sqrt(q.size(-1)) = 1/sqrt(D_h).",
           _mha(scale_by="size1")),
    Mutant("missing_W_o", "the output projection W_o is missing: apply W_o to the merged heads.", _mha(use_W_o=False)),
    Mutant("softmax_wrong_dim", WRONG_DIM_HINT, _mha(softmax_dim=-2)),
    Mutant("mask_ignored", "the mask was ignored: fill the scores with -inf where the mask is False, before the softmax (the mask broadcasts over heads).",
           _mha(mask_mode="ignored")),
    Mutant("mask_after_softmax", MASK_AFTER_HINT, _mha(mask_mode="after")),
    Mutant("dropout_in_eval_mode", "dropout was applied in eval mode: use nn.Dropout (or F.dropout(..., training=self.training)) so that model.eval() turns it off.",
           _mha(dropout_mode="always")),
    Mutant("qk_projections_swapped", "the query was projected with W_k and the key with W_q: use W_q on query and W_k on key (the parameters are loaded by name).",
           _mha(swap_qk_projections=True)),
    Mutant("values_not_projected", "the weights were applied to the unprojected value (split_heads(value) instead of split_heads(W_v(value))): the values are W_v(value), split into heads like q and k.",
           _mha(project_v=False)),
    Mutant("softmax_over_heads", "the softmax was taken over dim 1, which for scores (B, H, S_q, S_k) is the heads: take it over the keys, dim=-1.",
           _mha(softmax_dim=1)),
    Mutant("heads_merged_in_reverse_order", "the heads were merged in reverse order (head H-1 first): head h fills the features h·D_h ... (h+1)·D_h - 1 of the merged tensor, in head order.",
           _mha(heads_reversed=True)),
    Mutant("neg_1e9_fully_masked", NEG_1E9_HINT, _mha(mask_mode="neg_1e9")),
    Mutant("value_from_key", "the values were projected from `key` instead of `value`: in cross-attention key and value can be different tensors.",
           _mha(value_from_key=True)),
    Mutant("weights_averaged_over_heads", "the weights were averaged over heads (what nn.MultiheadAttention returns by default); return the per-head weights (B, H, S_q, S_k).",
           _mha(average_heads=True)),
    Mutant("bias_flag_ignored", MHA_BIAS_HINT, _mha(bias_ignored=True)),
    Mutant("dropout_ignored", DROPOUT_IGNORED, _mha(dropout_mode="ignored")),
    Mutant("dropout_not_rescaled", DROPOUT_NOT_RESCALED, _mha(dropout_mode="not_rescaled")),
    Mutant("dropout_shared_over_heads", DROPOUT_SHARED_OVER_HEADS, _mha(dropout_mode="shared_heads")),
    Mutant("dropout_on_output", DROPOUT_ON_OUTPUT, _mha(dropout_mode="output")),
    Mutant("weights_returned_before_dropout", DROPOUT_NOT_RETURNED, _mha(dropout_mode="not_returned")),
    Mutant("dropout_keep_probability", dropout_hint("keep_probability", "dropout"), _mha(dropout_mode="keep")),
    Mutant("keys_kept_between_calls", STATE, _MHAKeepsKeys),
]


class _VMHAEinsum(nn.Module):
    """W_o created first, then W_v, W_k, W_q; einsum with the heads as an index; assert on the sizes."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        assert d_model % num_heads == 0, "d_model must be divisible by num_heads"  # assert is fine
        self.h = num_heads
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def split_heads(self, x):
        return x.unflatten(-1, (self.h, -1)).permute(0, 2, 1, 3)  # (B, S, H, D_h) -> (B, H, S, D_h)

    def merge_heads(self, x):
        return x.permute(0, 2, 1, 3).flatten(-2)  # (B, S, H, D_h) -> (B, S, d_model)

    def forward(self, query, key, value, mask=None):
        q, k, v = self.split_heads(self.W_q(query)), self.split_heads(self.W_k(key)), self.split_heads(self.W_v(value))
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = torch.where(mask, scores, torch.full_like(scores, NEG_INF))
        w = torch.softmax(scores, dim=-1)
        w = torch.where(torch.isnan(w), torch.zeros_like(w), w)
        w = self.drop(w)
        return self.W_o(self.merge_heads(torch.einsum("bhqk,bhkd->bhqd", w, v))), w


class _VMHALoopOverHeads(nn.Module):
    """A loop over heads on slices of the projection weights, float64 inside, torch.cat to merge."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise AssertionError("d_model % num_heads != 0")
        self.num_heads, self.p = num_heads, dropout
        self.W_q, self.W_k = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)
        self.W_v, self.W_o = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x):
        return torch.stack(x.chunk(self.num_heads, dim=-1), dim=1)  # (B, H, S, D_h)

    def merge_heads(self, x):
        return torch.cat(x.unbind(dim=1), dim=-1)  # (B, S, H·D_h)

    def _head(self, lin, x, h, d_h):
        w = lin.weight[h * d_h:(h + 1) * d_h].double()
        b = None if lin.bias is None else lin.bias[h * d_h:(h + 1) * d_h].double()
        return F.linear(x.double(), w, b)  # (B, S, D_h)

    def forward(self, query, key, value, mask=None):
        d_h = query.size(-1) // self.num_heads
        outs, ws = [], []
        for h in range(self.num_heads):
            q, k, v = self._head(self.W_q, query, h, d_h), self._head(self.W_k, key, h, d_h), self._head(self.W_v, value, h, d_h)
            s = q @ k.transpose(1, 2) / math.sqrt(d_h)  # (B, S_q, S_k)
            if mask is not None:
                m = mask.expand(query.size(0), self.num_heads, query.size(1), key.size(1))[:, h]
                s = s.masked_fill(~m, NEG_INF)
            w = torch.softmax(s, dim=-1).nan_to_num(0.0)
            w = F.dropout(w, self.p, training=self.training)
            outs.append(w @ v)
            ws.append(w)
        merged = torch.cat(outs, dim=-1).to(query.dtype)  # (B, S_q, d_model)
        return self.W_o(merged), torch.stack(ws, dim=1).to(query.dtype)


MHA_EXERCISE_VARIANTS = [Variant("other_parameter_order_einsum_assert", _VMHAEinsum),
                         Variant("loop_over_heads_float64", _VMHALoopOverHeads, demo=True)]


def _indivisible_tip(cls) -> str | None:
    """Not graded: d_model not divisible by num_heads is a caller's bug. The tip reads the code (a
    raise or an assert): it never builds the module outside the contract."""
    if raises_somewhere(cls) is not False:
        return None
    return ("MultiHeadAttention has no raise or assert: d_model // num_heads would drop features when "
            "d_model % num_heads != 0, so a clear error (ValueError or assert) there helps.")


MHA_EXERCISE = Exercise(
    name="MultiHeadAttention",
    reference=ref.MultiHeadAttention,
    make_cases=_mha_cases,
    kind="class",
    mutants=MHA_MUTANTS,
    variants=MHA_EXERCISE_VARIANTS,
    output_names=("out", "weights"),
    input_names=("query", "key", "value"),
    rescale=_mha_rescale,
    scale_names=_mha_scale_names,
    tips=(_indivisible_tip,),
    contract=Contract("""Multi-head attention: H = num_heads heads of size D_h = d_model / H, in parallel.

    Parameters (the check loads its weights into them by name; no other parameters):
        W_q, W_k, W_v, W_o: nn.Linear(d_model, d_model, bias=bias)
    The check always uses a d_model divisible by num_heads.
    forward(query, key, value, mask=None):
        query: (B, S_q, d_model)   key, value: (B, S_k, d_model)
        mask: bool, broadcastable to (B, H, S_q, S_k), True = may attend; or None
        Head h uses the features h·D_h ... (h+1)·D_h - 1 of W_q(query), W_k(key), W_v(value);
        its scores are scaled by 1/sqrt(D_h); the heads' outputs are merged back in that order
        and projected by W_o.
        returns out (B, S_q, d_model) and the per-head weights (B, H, S_q, S_k); a fully masked
        query row gets zero weights.
    """, forbid=(SDPA, MHA), grad="query, key, value and every parameter", kinds={"query": "tokens", "key": "key", "value": "value", "mask": "mask"}, dropout=MHA_DROPOUT,
                      scores=_mha_case_scores),
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
    # gradients through the reshuffle (a leaf input that requires grad: x.view(...).transpose_(...) fails on it)
    B, S, H, D_h = 2, 3, 2, 2
    x = randn(B, S, H * D_h, gen=g, dtype=F64) if method == "split" else randn(B, H, S, D_h, gen=g, dtype=F64)
    ctor = f"MultiHeadAttention({H * D_h}, num_heads={H})"
    cases.append(Case(f"gradients (float64), x a leaf that requires grad: {ctor}.{method}_heads(x {tuple(x.shape)})",
                      (x,), init={"ctor": (H * D_h, H), "seed": seed}, grad=True))
    return cases


def _split_view_no_transpose(self, x):
    B, S, _ = x.shape
    return x.view(B, self.num_heads, S, self.d_head)


def _merge_view_no_transpose(self, x):
    B, H, S, D_h = x.shape
    return x.reshape(B, S, H * D_h)


def _split_interleaved(self, x):
    B, S, _ = x.shape
    return x.view(B, S, self.d_head, self.num_heads).permute(0, 3, 1, 2)


def _split_no_transpose(self, x):
    B, S, _ = x.shape
    return x.view(B, S, self.num_heads, self.d_head)


def _split_into_batch(self, x):
    B, S, _ = x.shape
    return x.view(B, S, self.num_heads, self.d_head).transpose(1, 2).reshape(B * self.num_heads, S, self.d_head)


def _split_permute_wrong(self, x):
    B, S, _ = x.shape
    return x.view(B, S, self.num_heads, self.d_head).permute(0, 2, 3, 1).reshape(B, self.num_heads, S, self.d_head)


SPLIT_MUTANTS = [
    Mutant("view_without_transpose", "split_heads viewed (B, S, d_model) directly as (B, H, S, D_h): view it as (B, S, H, D_h) first, then transpose(1, 2).",
           _variant(_MHAMistake, "MultiHeadAttention", split_heads=_split_view_no_transpose)),
    Mutant("interleaved_heads", "split_heads gave head h the features h, h + H, h + 2H, ... (a view as (B, S, D_h, H)); head h owns the contiguous block of features h·D_h to (h+1)·D_h - 1: view as (B, S, H, D_h).",
           _variant(_MHAMistake, "MultiHeadAttention", split_heads=_split_interleaved)),
    Mutant("missing_transpose", "split_heads returned (B, S, H, D_h): transpose(1, 2) to put the heads before the positions, (B, H, S, D_h).",
           _variant(_MHAMistake, "MultiHeadAttention", split_heads=_split_no_transpose)),
    Mutant("heads_folded_into_batch", "split_heads returned (B·H, S, D_h): keep batch and heads as separate dims, (B, H, S, D_h).",
           _variant(_MHAMistake, "MultiHeadAttention", split_heads=_split_into_batch)),
    Mutant("permuted_then_reshaped", "split_heads permuted (B, S, H, D_h) to (B, H, D_h, S) and reshaped that to (B, H, S, D_h), which scrambles positions and features: transpose(1, 2) alone gives (B, H, S, D_h).",
           _variant(_MHAMistake, "MultiHeadAttention", split_heads=_split_permute_wrong)),
]


def _merge_interleaved(self, x):
    B, H, S, D_h = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, S, D_h * H)


def _merge_reversed(self, x):
    B, H, S, D_h = x.shape
    return x.flip(1).transpose(1, 2).reshape(B, S, H * D_h)


def _merge_mean(self, x):
    return x.mean(dim=1)


def _merge_view_not_contiguous(self, x):
    B, H, S, D_h = x.shape
    return x.transpose(1, 2).view(B, S, H * D_h)


MERGE_MUTANTS = [
    Mutant("view_without_transpose", "merge_heads reshaped (B, H, S, D_h) directly to (B, S, d_model): transpose(1, 2) to (B, S, H, D_h) first, then reshape (contiguous() before view).",
           _variant(_MHAMistake, "MultiHeadAttention", merge_heads=_merge_view_no_transpose)),
    Mutant("interleaved_heads", "merge_heads interleaved the heads' features (a permute to (B, S, D_h, H)): head h must fill the contiguous block h·D_h to (h+1)·D_h - 1, i.e. transpose to (B, S, H, D_h).",
           _variant(_MHAMistake, "MultiHeadAttention", merge_heads=_merge_interleaved)),
    Mutant("heads_in_reverse_order", "merge_heads put the heads in reverse order (head H-1 first): head h fills the features h·D_h ... (h+1)·D_h - 1, in head order.",
           _variant(_MHAMistake, "MultiHeadAttention", merge_heads=_merge_reversed)),
    Mutant("averaged_heads", "merge_heads averaged the heads, (B, S, D_h); concatenate them instead: (B, S, H·D_h) = (B, S, d_model).",
           _variant(_MHAMistake, "MultiHeadAttention", merge_heads=_merge_mean)),
    Mutant("view_of_non_contiguous", "merge_heads called .view on a transposed (non-contiguous) tensor: use .contiguous().view(...) or .reshape(...) after transpose(1, 2).",
           _variant(_MHAMistake, "MultiHeadAttention", merge_heads=_merge_view_not_contiguous)),
]

check_split_heads = register(Exercise(
    name="split_heads",
    reference=ref.MultiHeadAttention,
    make_cases=lambda seed: _head_cases(seed, "split"),
    kind="class",
    run=_run_method("split_heads"),
    input_names=("x",),
    mutants=SPLIT_MUTANTS,
    variants=MHA_EXERCISE_VARIANTS,
    contract=Contract("""(B, S, d_model) -> (B, H, S, D_h), H = num_heads: head h gets the features h·D_h ... (h+1)·D_h - 1.""",
                      grad="x", kinds={"x": "tensor"}),
))
check_merge_heads = register(Exercise(
    name="merge_heads",
    reference=ref.MultiHeadAttention,
    make_cases=lambda seed: _head_cases(seed, "merge"),
    kind="class",
    run=_run_method("merge_heads"),
    input_names=("x",),
    mutants=MERGE_MUTANTS,
    variants=MHA_EXERCISE_VARIANTS,
    contract=Contract("""(B, H, S, D_h) -> (B, S, d_model), the inverse of split_heads: head h fills the features h·D_h ... (h+1)·D_h - 1.""",
                      grad="x", kinds={"x": "tensor"}),
))
