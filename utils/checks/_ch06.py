"""Checks for chapter 06 — cross-attention and the transformer block.

Every exercise here is trained through later (the chapter's date-normalisation model, chapter 14),
so each check compares gradients too: float64 cases where the harness converts the module to
float64 and compares dL/dx (and dL/dmemory) and dL/d<every parameter> for a fixed random loss.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import reference as ref
from .._guard import unguarded
from ._ch05 import random_state
from ._contract import Contract
from ._contract import Dropout
from ._core import Case, Exercise, Mutant, Variant, build_module, describe, generator, randn, rng
from ._forbid import LAYERNORM, MHA
from ._guards import dropout_hint
from ._registry import register

__all__ = ["check_LayerNorm", "check_FeedForward", "check_DecoderLayer"]

F64 = torch.float64


def _variant(base, name, **attrs):
    return type(name, (base,), attrs)


def _ctor_label(name, ctor, ctor_kwargs) -> str:
    args = [repr(a) for a in ctor] + [f"{k}={v!r}" for k, v in ctor_kwargs.items()]
    return f"{name}({', '.join(args)})"


def _f64_state(state: dict) -> dict:
    return {k: v.to(F64) for k, v in state.items()}


# ---------------------------------------------------------------- LayerNorm
def _layernorm_state(d: int, g: torch.Generator) -> dict:
    """weight ≈ 1 ± 0.5 and bias ≈ 0 ± 0.5, so a missing or swapped affine part shows."""
    return {"weight": 1.0 + randn(d, gen=g, scale=0.5), "bias": randn(d, gen=g, scale=0.5)}


INIT_HINT = ("a freshly built LayerNorm must start as the identity normalisation: weight = torch.ones(d_model), "
             "bias = torch.zeros(d_model), both nn.Parameter named `weight` and `bias`.")


def _run_fresh(cls, case: Case):
    """Build the module with no parameters loaded and return its parameters by name."""
    module = build_module(cls, case)
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def _judge_fresh_init(d: int):
    def judge(got) -> str | None:
        if not isinstance(got, dict) or not {"weight", "bias"} <= set(got):
            names = sorted(got) if isinstance(got, dict) else describe(got)
            return f"LayerNorm({d}) has parameters {names}; expected `weight` and `bias`. {INIT_HINT}"
        w, b = got["weight"], got["bias"]
        if tuple(w.shape) != (d,) or tuple(b.shape) != (d,):
            return f"weight and bias should have shape ({d},), got {tuple(w.shape)} and {tuple(b.shape)}."
        if not (torch.equal(w.double(), torch.ones(d, dtype=F64)) and torch.equal(b.double(), torch.zeros(d, dtype=F64))):
            return (f"LayerNorm({d}) starts with weight {w[:4].tolist()}... and bias {b[:4].tolist()}...: "
                    f"Likely mistake: {INIT_HINT}")
        return None

    return judge


def _layernorm_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, x, eps=None, tol=None, grad=False):
        d = x.shape[-1]
        ctor_kwargs = {} if eps is None else {"eps": eps}
        state = _layernorm_state(d, g)
        if grad:
            x, state = x.to(F64), _f64_state(state)
            label = f"gradients (float64, weight and bias included), {label}"
        init = {"ctor": (d,), "ctor_kwargs": ctor_kwargs, "seed": seed, "state": state}
        cases.append(Case(f"{label}: x {tuple(x.shape)}, {_ctor_label('LayerNorm', (d,), ctor_kwargs)}",
                          (x,), init=init, tol=tol, grad=grad))

    add("(B, S, d_model)", randn(2, 5, 8, gen=g))
    add("(N, d_model), odd d_model", randn(6, 7, gen=g, scale=2.0))
    add("(B, H, S, d) leading dims", randn(2, 3, 4, 5, gen=g))
    add("(B, S, d_model)", randn(2, 3, 6, gen=g), grad=True)
    add("eps = 0.1 (eps is visible)", randn(2, 4, 6, gen=g), eps=0.1)
    add("d_model = 2", randn(3, 4, 2, gen=g))
    add("a single position (S = 1)", randn(3, 1, 16, gen=g))
    add("eps = 1e-2, small inputs", randn(2, 3, 9, gen=g, scale=0.1), eps=1e-2)
    add("tiny inputs (std 1e-3): eps dominates the variance", randn(2, 5, 8, gen=g, scale=1e-3))
    x = randn(2, 4, 6, gen=g)
    x[0, 1] = 3.0  # a constant row: variance 0, output = bias
    x[1, 2] = -1.5
    add("constant rows (variance 0)", x)
    x = randn(2, 3, 5, gen=g)
    x[1, 0] = 0.25
    add("a constant row (variance 0), eps = 0.1", x, eps=0.1, grad=True)
    x = 1000.0 + randn(2, 4, 32, gen=g)
    # float32 resolution at 1000 is 6e-5: a correct mean (or nn.LayerNorm's Welford) can differ
    # from ours by a few of those, so allow 1e-3; E[x²] - E[x]² cancels catastrophically here
    # and is off by ~1e-1.
    add("a large offset (mean 1000, std 1)", x, tol=(1e-3, 1e-4))
    add("large-magnitude inputs", randn(2, 3, 12, gen=g, scale=1e3))
    for i in range(4):
        lead = tuple(r.randint(1, 4) for _ in range(r.randint(1, 3)))
        d = r.choice([3, 4, 10, 17, 24])
        eps = r.choice([None, None, 1e-3])
        add(f"random case {i + 1}", randn(*lead, d, gen=g, scale=r.choice([0.5, 1.0, 3.0])), eps=eps)
    d = r.choice([5, 8, 12])
    cases.append(Case(f"freshly built LayerNorm({d}): weight ones, bias zeros", (), init={"ctor": (d,), "seed": seed},
                      run=_run_fresh, judge=_judge_fresh_init(d)))
    # forward values first, gradients last: a wrong eps is first seen (and named) where eps shows
    return sorted(cases, key=lambda c: c.grad)


_LayerNorm = unguarded(ref.LayerNorm)


class _LayerNormStdBased(_LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


class _LayerNormVariant(_LayerNorm):
    unbiased = False
    eps_outside = False
    use_eps = True
    dim = -1
    affine = True
    one_pass = False
    fixed_eps = None
    keepdim = True
    detach_stats = False

    def forward(self, x):
        dims = tuple(range(x.dim())) if self.dim == "all" else self.dim
        mean = x.mean(dims, keepdim=self.keepdim)
        if self.one_pass:
            var = (x * x).mean(dims, keepdim=True) - mean * mean
        else:
            var = x.var(dims, keepdim=self.keepdim, unbiased=self.unbiased)
        if self.detach_stats:
            mean, var = mean.detach(), var.detach()
        eps = (self.eps if self.fixed_eps is None else self.fixed_eps) if self.use_eps else 0.0
        y = (x - mean) / (var.sqrt() + eps) if self.eps_outside else (x - mean) / (var + eps).sqrt()
        return self.weight * y + self.bias if self.affine else y


class _LayerNormDefaultEps1e6(_LayerNorm):
    def __init__(self, d_model, eps=1e-6):
        super().__init__(d_model, eps)


class _LayerNormRandomInit(_LayerNorm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.weight = nn.Parameter(torch.randn(d_model))
        self.bias = nn.Parameter(torch.randn(d_model))


STD_BASED_HINT = ("this is the `a * (x - mean) / (x.std() + eps) + b` variant: x.std() is the unbiased std (divides "
                  "by d_model - 1) and eps is added to the std; nn.LayerNorm uses the biased variance and sqrt(var + eps).")

LAYERNORM_MUTANTS = [
    Mutant("std_based", STD_BASED_HINT, _LayerNormStdBased),
    Mutant("unbiased_variance", "the variance is unbiased (divided by d_model - 1): LayerNorm uses the biased variance, var(unbiased=False) or mean((x - mean)²).",
           _variant(_LayerNormVariant, "LayerNorm", unbiased=True)),
    Mutant("eps_outside_sqrt", "eps was added to the std instead of the variance: divide by sqrt(var + eps), not sqrt(var) + eps.",
           _variant(_LayerNormVariant, "LayerNorm", eps_outside=True)),
    Mutant("no_eps", "eps is missing: a constant row (variance 0) gives 0 / 0 = NaN; divide by sqrt(var + eps).",
           _variant(_LayerNormVariant, "LayerNorm", use_eps=False)),
    Mutant("eps_argument_ignored", "the `eps` argument is ignored (a fixed 1e-5 is used): store the constructor's eps (self.eps = eps) and use it.",
           _variant(_LayerNormVariant, "LayerNorm", fixed_eps=1e-5)),
    *[Mutant(f"eps_fixed_at_{e:g}", f"eps is a fixed {e:g}, not the constructor's `eps` (default 1e-5): store the argument (self.eps = eps) and use it inside the square root.",
             _variant(_LayerNormVariant, "LayerNorm", fixed_eps=e)) for e in (1e-6, 1e-8, 1e-12, 1e-3)],
    Mutant("default_eps_1e-6", "the constructor's default eps is 1e-6; nn.LayerNorm's (and the exercise's) default is 1e-5: def __init__(self, d_model, eps=1e-5).",
           _LayerNormDefaultEps1e6),
    Mutant("wrong_dim", "the statistics were taken over dim -2 (the positions) instead of the last dim: LayerNorm normalises each position's d_model features (dim=-1, keepdim=True).",
           _variant(_LayerNormVariant, "LayerNorm", dim=-2)),
    Mutant("statistics_over_everything", "the mean and variance were taken over the whole tensor (x.mean() with no dim): LayerNorm normalises each position on its own, over the last dim (dim=-1, keepdim=True).",
           _variant(_LayerNormVariant, "LayerNorm", dim="all")),
    Mutant("no_keepdim", "the mean and variance lost their last dim (no keepdim=True), so (x - mean) broadcasts (..., d_model) against (...,): use x.mean(dim=-1, keepdim=True).",
           _variant(_LayerNormVariant, "LayerNorm", keepdim=False)),
    Mutant("missing_weight_bias", "the learned scale and shift are missing: return weight * x_hat + bias.",
           _variant(_LayerNormVariant, "LayerNorm", affine=False)),
    Mutant("one_pass_variance", "the variance was computed as E[x²] - E[x]², which cancels catastrophically when the mean is large compared with the std: use mean((x - mean)²).",
           _variant(_LayerNormVariant, "LayerNorm", one_pass=True)),
    Mutant("statistics_detached", "the forward values are right but the gradients are not: the mean or variance was detached (or computed outside autograd), yet the gradient flows through them too; keep them in the graph.",
           _variant(_LayerNormVariant, "LayerNorm", detach_stats=True)),
    Mutant("random_init", INIT_HINT, _LayerNormRandomInit),
]


# Correct answers written differently: they must pass.
class _VLayerNormFloat64(nn.Module):
    """bias created first, var_mean, rsqrt, float64 inside."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        xd = x.double()
        var, mean = torch.var_mean(xd, dim=-1, keepdim=True, correction=0)
        y = (xd - mean) * torch.rsqrt(var + self.eps)
        return (y * self.weight.double() + self.bias.double()).to(x.dtype)


class _VLayerNormManual(nn.Module):
    """Sums written out, assert instead of ValueError, weight and bias via torch.addcmul."""

    def __init__(self, d_model, eps=1e-5):
        assert d_model > 0, "d_model must be positive"
        super().__init__()
        self.d = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.full((d_model,), 1.0))
        self.bias = nn.Parameter(torch.full((d_model,), 0.0))

    def forward(self, x):
        mean = x.sum(dim=-1, keepdim=True) / self.d
        centred = x - mean
        var = (centred * centred).sum(dim=-1, keepdim=True) / self.d
        return torch.addcmul(self.bias, centred / torch.sqrt(var + self.eps), self.weight)


class _VLayerNormEpsBuffer(nn.Module):
    """eps kept in a registered buffer (a buffer is not a parameter; the prompt forbids none)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.register_buffer("eps", torch.tensor(eps))
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


LAYERNORM_EXERCISE = Exercise(
    name="LayerNorm",
    reference=ref.LayerNorm,
    make_cases=_layernorm_cases,
    kind="class",
    mutants=LAYERNORM_MUTANTS,
    variants=[Variant("float64_var_mean_rsqrt_bias_first", _VLayerNormFloat64, demo=True),
              Variant("sums_by_hand_addcmul", _VLayerNormManual),
              Variant("eps_in_a_buffer", _VLayerNormEpsBuffer)],
    input_names=("x",),
    contract=Contract("""Layer normalisation over the last dim: the same function as nn.LayerNorm(d_model, eps).

    Parameters (nn.Parameter, by these names): weight (d_model,) initialised to ones,
        bias (d_model,) initialised to zeros.
    forward(x (..., d_model)) -> (..., d_model):
        weight * (x - mean) / sqrt(var + eps) + bias, with the mean and the biased variance
        (divide by d_model, not d_model - 1) over the last dim, eps inside the square root.
    A constant row (variance 0) gives bias.
    """, forbid=(LAYERNORM,), grad="x, weight and bias", kinds={"x": "tensor"}),
)
check_LayerNorm = register(LAYERNORM_EXERCISE)


# ---------------------------------------------------------------- FeedForward
DROPOUT_IGNORED = ("in training mode no hidden unit was dropped: apply nn.Dropout(dropout) to the "
                   "ReLU activations, linear2(dropout(relu(linear1(x)))).")
DROPOUT_AFTER_LINEAR2 = ("dropout was applied to the output of linear2; it acts on the hidden ReLU activations, "
                         "between the two linears: linear2(dropout(relu(linear1(x)))).")
DROPOUT_NOT_RESCALED = ("dropout zeroed hidden units but did not rescale the kept ones by 1/(1 - dropout): "
                        "nn.Dropout does both.")
_DROP_D = 64


def _dropout_probe_state() -> dict:
    """linear1 = 0·x + 1 (every hidden unit is relu(1) = 1, whatever x), linear2 = I + 0.5.

    Then the training-mode output shows each hidden unit's dropout directly: 0.5 where the unit
    was dropped, 0.5 + 1/(1 - p) where it was kept.
    """
    d = _DROP_D
    return {"linear1.weight": torch.zeros(d, d), "linear1.bias": torch.ones(d),
            "linear2.weight": torch.eye(d), "linear2.bias": torch.full((d,), 0.5)}


def _ffn_dropout_probe(p: float, seed: int) -> Case:
    x = randn(32, _DROP_D, gen=generator(seed))
    return Case(f"x {tuple(x.shape)}, FeedForward({_DROP_D}, {_DROP_D}, dropout={p:g}), linear1 = 0·x + 1, "
                f"linear2 = I + 0.5", (x,), init={"ctor": (_DROP_D, _DROP_D), "ctor_kwargs": {"dropout": p},
                                                   "seed": seed, "state": _dropout_probe_state()})


def _ffn_dropout_consistent(case: Case, got) -> str | None:
    """Every output entry is 0.5 + a hidden unit (0 when dropped): a zero entry means the output was dropped."""
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != (32, _DROP_D):
        return f"the output should be a tensor of shape (32, {_DROP_D}), got {describe(got)}."
    if float((got.detach().abs() < 1e-4).double().mean()) > 0.02:
        return f"whole output entries were zeroed. Likely mistake: {DROPOUT_AFTER_LINEAR2}"
    return None


FFN_DROPOUT = Dropout(on="each hidden ReLU activation", what="hidden units", ctor="dropout", probe=_ffn_dropout_probe,
                      values=lambda case, got: got - 0.5, consistent=_ffn_dropout_consistent,
                      hints={"ignored": DROPOUT_IGNORED, "not_rescaled": DROPOUT_NOT_RESCALED})


def _ffn_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, d_model, d_ff, dropout=0.0, scale=1.0, grad=False):
        module = unguarded(ref.FeedForward)(d_model, d_ff)
        x = randn(*lead, d_model, gen=g, scale=scale)
        state = random_state(module, g)
        if grad:
            x, state = x.to(F64), _f64_state(state)
            label = f"gradients (float64, parameters included), {label}"
        ctor_kwargs = {"dropout": dropout} if dropout else {}
        init = {"ctor": (d_model, d_ff), "ctor_kwargs": ctor_kwargs, "seed": seed, "state": state}
        cases.append(Case(f"{label}: x {tuple(x.shape)}, {_ctor_label('FeedForward', (d_model, d_ff), ctor_kwargs)}",
                          (x,), init=init, grad=grad))

    add("(B, S, d_model), d_ff = 4 d_model", (2, 5), 8, 32)
    add("d_ff < d_model", (2, 3), 12, 5)
    add("(N, d_model)", (7,), 6, 16)
    add("(B, S, d_model)", (2, 3), 6, 10, grad=True)
    add("(B, H, S, d) leading dims", (2, 2, 3), 4, 9)
    add("a single position (S = 1)", (3, 1), 8, 8)
    add("odd sizes", (1, 7), 5, 11)
    add("dropout=0.5 in eval mode", (2, 4), 8, 24, dropout=0.5)
    add("dropout=0.3 in eval mode", (2, 3), 5, 7, dropout=0.3, grad=True)
    add("large-magnitude inputs", (2, 4), 8, 16, scale=20.0)
    for i in range(4):
        lead = tuple(r.randint(1, 4) for _ in range(r.randint(1, 3)))
        add(f"random case {i + 1}", lead, r.choice([3, 4, 8, 10]), r.choice([2, 7, 16, 33]),
            dropout=r.choice([0.0, 0.1]))
    return cases


_FeedForward = unguarded(ref.FeedForward)


class _FeedForwardVariant(_FeedForward):
    activation = "relu"
    placement = "between"  # "between" the linears (correct), "after" linear2, or "both"
    dropout_always = False
    inverted_mask = False
    dropout_where = "hidden"  # "hidden" (correct), "output", "none"
    rescale = True

    def act(self, h):
        return {"relu": F.relu, "gelu": F.gelu, "none": lambda t: t}[self.activation](h)

    def drop(self, h):
        if self.inverted_mask:  # keeps a unit with probability p (the mask drawn as rand < p)
            p = self.dropout.p
            return h * (torch.rand_like(h) < p) / (1 - p) if self.training and p > 0 else h
        if self.dropout_always:
            return F.dropout(h, self.dropout.p, training=True)
        if not self.rescale:
            return h * (torch.rand_like(h) >= self.dropout.p) if self.training else h
        return self.dropout(h)

    def forward(self, x):
        h = self.linear1(x)
        if self.placement in ("between", "both"):
            h = self.act(h)
        if self.dropout_where == "hidden":
            h = self.drop(h)
        y = self.linear2(h)
        y = self.act(y) if self.placement in ("after", "both") else y
        return self.drop(y) if self.dropout_where == "output" else y


FFN_MUTANTS = [
    Mutant("gelu_instead_of_relu", "the activation is GELU; this FeedForward uses ReLU (torch.relu / nn.ReLU).",
           _variant(_FeedForwardVariant, "FeedForward", activation="gelu")),
    Mutant("no_activation", "the activation is missing: two linear layers in a row are just one linear map; apply ReLU between linear1 and linear2.",
           _variant(_FeedForwardVariant, "FeedForward", activation="none")),
    Mutant("activation_after_linear2", "the ReLU was applied after linear2 instead of between the two linears: linear2(relu(linear1(x))).",
           _variant(_FeedForwardVariant, "FeedForward", placement="after")),
    Mutant("extra_activation_at_the_end", "a second ReLU was applied to the output of linear2: the output must be able to be negative; return linear2(relu(linear1(x))).",
           _variant(_FeedForwardVariant, "FeedForward", placement="both")),
    Mutant("dropout_in_eval_mode", "dropout was applied in eval mode: use nn.Dropout (or F.dropout(..., training=self.training)) so that model.eval() turns it off.",
           _variant(_FeedForwardVariant, "FeedForward", dropout_always=True)),
    Mutant("dropout_ignored", DROPOUT_IGNORED, _variant(_FeedForwardVariant, "FeedForward", dropout_where="none")),
    Mutant("dropout_after_linear2", DROPOUT_AFTER_LINEAR2, _variant(_FeedForwardVariant, "FeedForward", dropout_where="output")),
    Mutant("dropout_not_rescaled", DROPOUT_NOT_RESCALED, _variant(_FeedForwardVariant, "FeedForward", rescale=False)),
    Mutant("dropout_inverted_keep_mask", dropout_hint("keep_probability", "dropout"),
           _variant(_FeedForwardVariant, "FeedForward", inverted_mask=True)),
]


class _VFeedForwardFunctional(nn.Module):
    """linear2 created first; F.linear on the parameters, clamp_min for ReLU, F.dropout with self.training."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear2 = nn.Linear(d_ff, d_model)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.p = dropout

    def forward(self, x):
        h = F.linear(x, self.linear1.weight, self.linear1.bias).clamp_min(0.0)
        h = F.dropout(h, self.p, training=self.training)
        return F.linear(h, self.linear2.weight, self.linear2.bias)


class _VFeedForwardEinsum(nn.Module):
    """float64 inside, einsum, a hand-made dropout mask."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = dropout

    def forward(self, x):
        xd = x.double()
        h = torch.einsum("...d,fd->...f", xd, self.linear1.weight.double()) + self.linear1.bias.double()
        h = torch.where(h > 0, h, torch.zeros_like(h))
        if self.training and self.dropout > 0:
            h = h * (torch.rand_like(h) >= self.dropout) / (1 - self.dropout)
        y = torch.einsum("...f,df->...d", h, self.linear2.weight.double()) + self.linear2.bias.double()
        return y.to(x.dtype)


class _VFeedForwardSequential(nn.Module):
    """linear1 and linear2 by their names, also held in an nn.Sequential (the same parameters twice)."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.linear1, nn.ReLU(), nn.Dropout(dropout), self.linear2)

    def forward(self, x):
        return self.net(x)


class _VFeedForwardSequentialFirst(nn.Module):
    """The nn.Sequential built first, linear1 and linear2 pointing into it (its names come first)."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.linear1, self.linear2 = self.net[0], self.net[3]

    def forward(self, x):
        return self.net(x)


FFN_EXERCISE = Exercise(
    name="FeedForward",
    reference=ref.FeedForward,
    make_cases=_ffn_cases,
    kind="class",
    mutants=FFN_MUTANTS,
    variants=[Variant("functional_linear2_first", _VFeedForwardFunctional),
              Variant("float64_einsum_own_dropout", _VFeedForwardEinsum, demo=True),
              Variant("linears_also_in_a_sequential", _VFeedForwardSequential),
              Variant("sequential_first_linears_point_into_it", _VFeedForwardSequentialFirst)],
    input_names=("x",),
    contract=Contract("""Position-wise feed-forward network: linear2(dropout(relu(linear1(x)))).

    Sub-modules, by these names (the check loads its parameters into them by name):
        linear1 = nn.Linear(d_model, d_ff), linear2 = nn.Linear(d_ff, d_model), both with bias.
    forward(x (..., d_model)) -> (..., d_model).
    """, grad="x and every parameter", kinds={"x": "tensor"}, dropout=FFN_DROPOUT),
)
check_FeedForward = register(FFN_EXERCISE)


# ---------------------------------------------------------------- DecoderLayer
def _decoder_state(module: nn.Module, g: torch.Generator) -> dict:
    """Random linear weights and biases; LayerNorm weights ≈ 1 ± 0.3 and biases ≈ 0 ± 0.3."""
    state = random_state(module, g)
    for name in state:
        if name.startswith("norm"):
            base = 1.0 if name.endswith("weight") else 0.0
            state[name] = base + randn(*state[name].shape, gen=g, scale=0.3)
    return state


def _padding(batch: int, s: int, g: torch.Generator, pad_all: bool = False) -> torch.Tensor:
    """Source padding mask (B, 1, 1, S_s), True = real token."""
    lengths = torch.randint(1, s + 1, (batch,), generator=g)
    lengths[0] = max(1, s - 2)
    mask = torch.arange(s)[None, :] < lengths[:, None]
    if pad_all:
        mask[-1] = False
    return mask[:, None, None, :]


def _decoder_case(label, g, seed, B, s_t, s_s, d, H, d_ff, src_mask=None, tgt_mask=None, dropout=0.0, scale=1.0,
                  grad=False, memory=None):
    module = unguarded(ref.DecoderLayer)(d, H, d_ff)
    x = randn(B, s_t, d, gen=g, scale=scale)
    memory = randn(B, s_s, d, gen=g, scale=scale) if memory is None else memory
    state = _decoder_state(module, g)
    if grad:
        x, memory, state = x.to(F64), memory.to(F64), _f64_state(state)
        label = f"gradients (float64, every parameter included), {label}"
    kwargs, dims = {}, f"x {tuple(x.shape)}, memory {tuple(memory.shape)}"
    if src_mask is not None:
        kwargs["src_mask"] = src_mask
        dims += f", src_mask {tuple(src_mask.shape)}"
    if tgt_mask is not None:
        kwargs["tgt_mask"] = tgt_mask
        dims += f", tgt_mask {tuple(tgt_mask.shape)}"
    ctor_kwargs = {"dropout": dropout} if dropout else {}
    dims += ", " + _ctor_label("DecoderLayer", (d, H, d_ff), ctor_kwargs)
    init = {"ctor": (d, H, d_ff), "ctor_kwargs": ctor_kwargs, "seed": seed, "state": state}
    return Case(f"{label}: {dims}", (x, memory), kwargs, init=init, grad=grad)


def _causal(s):
    return torch.ones(s, s, dtype=torch.bool).tril()


# Training-mode dropout probe: every weight 0, so each sub-layer's output is its last bias whatever
# its input (and whatever its own dropout drops inside): self_attn gives 1 on the first third of the
# features, cross_attn on the second, ffn on the last. With x = 0 the layer's output shows the
# dropout of each sub-layer's output directly: 0 where an entry was dropped, 1/(1 - p) where kept.
_DEC_B, _DEC_S, _DEC_D, _DEC_H = 4, 16, 12, 2
DEC_DROPOUT_IGNORED = ("in training mode no entry of the sub-layers' outputs was dropped: apply dropout to each "
                       "sub-layer's output before adding it to the stream, x = x + dropout(self_attn(...)), "
                       "and the same for cross_attn and ffn.")


def _decoder_dropout_state() -> dict:
    module = unguarded(ref.DecoderLayer)(_DEC_D, _DEC_H, 4)
    state = {k: torch.zeros_like(v) for k, v in module.state_dict().items()}
    third = _DEC_D // 3
    for i, name in enumerate(("self_attn.W_o.bias", "cross_attn.W_o.bias", "ffn.linear2.bias")):
        state[name][i * third:(i + 1) * third] = 1.0
    for i in (1, 2, 3):
        state[f"norm{i}.weight"] = torch.ones(_DEC_D)
    return state


def _decoder_dropout_probe(p: float, seed: int) -> Case:
    x, memory = torch.zeros(_DEC_B, _DEC_S, _DEC_D), torch.zeros(_DEC_B, 5, _DEC_D)
    return Case(f"x = 0 {tuple(x.shape)}, memory = 0 {tuple(memory.shape)}, DecoderLayer({_DEC_D}, {_DEC_H}, 4, "
                f"dropout={p:g}), every weight 0: self_attn, cross_attn and ffn each output 1 on a third of the "
                "features (their biases)", (x, memory),
                init={"ctor": (_DEC_D, _DEC_H, 4), "ctor_kwargs": {"dropout": p}, "seed": seed,
                      "state": _decoder_dropout_state()})


def _decoder_dropout_values(case: Case, got):
    return got[0]  # x: 0 + each sub-layer's (dropped) output, one third of the features each


DECODER_DROPOUT = Dropout(on="each entry of a sub-layer's output before it is added to x",
                          what="sub-layer outputs", ctor="dropout", probe=_decoder_dropout_probe,
                          values=_decoder_dropout_values, hints={"ignored": DEC_DROPOUT_IGNORED})


def _decoder_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(*args, **kwargs):
        cases.append(_decoder_case(args[0], g, seed, *args[1:], **kwargs))

    add("no masks, S_t ≠ S_s", 2, 4, 6, 8, 2, 16)
    add("causal tgt_mask only", 2, 5, 5, 8, 2, 16, tgt_mask=_causal(5))
    add("src padding mask only", 3, 5, 5, 8, 2, 12, src_mask=_padding(3, 5, g))
    add("both masks", 2, 6, 6, 12, 3, 24, src_mask=_padding(2, 6, g), tgt_mask=_causal(6))
    add("both masks, S_t ≠ S_s", 2, 3, 5, 8, 2, 16, src_mask=_padding(2, 5, g), tgt_mask=_causal(3))
    add("both masks, S_t ≠ S_s", 2, 3, 4, 6, 2, 8, src_mask=_padding(2, 4, g), tgt_mask=_causal(3), grad=True)
    add("a source that is all padding", 3, 4, 4, 8, 4, 8, src_mask=_padding(3, 4, g, pad_all=True), tgt_mask=_causal(4))
    add("a source that is all padding", 2, 3, 4, 6, 3, 8, src_mask=_padding(2, 4, g, pad_all=True),
        tgt_mask=_causal(3), grad=True)
    add("one target position (a decoding step)", 2, 1, 7, 8, 2, 16)
    add("one source position", 2, 5, 1, 6, 3, 10)
    add("a single head (H = 1)", 2, 3, 5, 6, 1, 12)
    add("odd sizes, D_h = 3", 1, 3, 7, 15, 5, 9)
    add("dropout=0.2 in eval mode", 2, 4, 4, 8, 2, 16, src_mask=_padding(2, 4, g), tgt_mask=_causal(4), dropout=0.2)
    add("larger inputs", 2, 4, 6, 8, 2, 16, scale=5.0)
    memory = randn(2, 5, 8, gen=g)
    memory[:, 3] = 40.0 * memory[:, 3] / memory[:, 3].norm(dim=-1, keepdim=True)  # a loud padded source token
    pad = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    pad[..., 3:] = False
    add("a padded source token with the largest scores", 2, 4, 5, 8, 2, 16, src_mask=pad, tgt_mask=_causal(4),
        memory=memory)
    for i in range(3):
        H, d_h = r.choice([1, 2, 4]), r.choice([2, 3])
        B, s_t = r.randint(1, 3), r.randint(1, 6)
        if i % 2:
            s_s = r.randint(1, 7)
            add(f"random case {i + 1}", B, s_t, s_s, H * d_h, H, r.choice([4, 16, 20]),
                src_mask=_padding(B, s_s, g), tgt_mask=_causal(s_t))
        else:
            add(f"random case {i + 1}", B, s_t, r.randint(1, 7), H * d_h, H, r.choice([4, 16, 20]))
    return cases


_DecoderLayer = unguarded(ref.DecoderLayer)


class _DecoderVariant(_DecoderLayer):
    post_norm = False
    residual = ("self", "cross", "ffn")
    cross_kv = "memory"  # "memory" (correct), "x": keys and values from the decoder stream
    swap_masks = False
    return_self_weights = False
    normalise_memory = False
    one_norm = False
    ignore_masks = ()  # "tgt", "src"
    cross_q_from_memory = False
    residual_from_normalised = False
    cross_causal = False

    def _sub(self, name, norm, x, f):
        """One residual sub-layer: pre-norm x + f(norm(x)) (or post-norm norm(x + f(x)))."""
        y = f(x) if self.post_norm else f(norm(x))
        if self.residual_from_normalised and not self.post_norm:
            return norm(x) + y  # the residual taken from the normalised stream
        out = x + y if name in self.residual else y
        return norm(out) if self.post_norm else out

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if self.swap_masks:
            src_mask, tgt_mask = tgt_mask, src_mask
        if "tgt" in self.ignore_masks:
            tgt_mask = None
        if "src" in self.ignore_masks:
            src_mask = None
        norm1 = self.norm1
        norm2 = self.norm1 if self.one_norm else self.norm2
        norm3 = self.norm1 if self.one_norm else self.norm3
        found = {}

        def self_block(h):
            a, found["self"] = self.self_attn(h, h, h, tgt_mask)
            return a

        def cross_block(h):
            mem = norm2(memory) if self.normalise_memory else memory
            kv = h if self.cross_kv == "x" else mem
            if self.cross_q_from_memory:  # query from memory, keys and values from the decoder stream
                a, found["cross"] = self.cross_attn(mem, h, h, None if src_mask is None else src_mask.transpose(-1, -2))
                return a
            mask = src_mask
            if self.cross_causal and src_mask is not None and tgt_mask is not None:
                # the causal band combined with the padding mask for the cross-attention too
                mask = src_mask & torch.ones(h.size(1), kv.size(1), dtype=torch.bool).tril()
            a, found["cross"] = self.cross_attn(h, kv, kv, mask)
            return a

        x = self._sub("self", norm1, x, self_block)
        x = self._sub("cross", norm2, x, cross_block)
        x = self._sub("ffn", norm3, x, self.ffn)
        return x, found["self" if self.return_self_weights else "cross"]



DECODER_MUTANTS = [
    Mutant("post_norm", "this is the post-norm layer, x = norm(x + sublayer(x)); the exercise is pre-norm: x = x + sublayer(norm(x)).",
           _variant(_DecoderVariant, "DecoderLayer", post_norm=True)),
    Mutant("no_residual_self_attn", "the residual connection around the self-attention is missing: x = x + self_attn(norm1(x), ...).",
           _variant(_DecoderVariant, "DecoderLayer", residual=("cross", "ffn"))),
    Mutant("no_residual_cross_attn", "the residual connection around the cross-attention is missing: x = x + cross_attn(norm2(x), memory, memory, src_mask).",
           _variant(_DecoderVariant, "DecoderLayer", residual=("self", "ffn"))),
    Mutant("no_residual_ffn", "the residual connection around the feed-forward network is missing: x = x + ffn(norm3(x)).",
           _variant(_DecoderVariant, "DecoderLayer", residual=("self", "cross"))),
    Mutant("cross_kv_from_x", "the cross-attention took its keys and values from the decoder stream x; they come from memory (the encoder output): cross_attn(norm2(x), memory, memory, src_mask).",
           _variant(_DecoderVariant, "DecoderLayer", cross_kv="x")),
    Mutant("cross_query_from_memory", "the cross-attention's query and key/value roles are swapped: the query comes from the decoder stream and the keys and values from memory, cross_attn(norm2(x), memory, memory, src_mask).",
           _variant(_DecoderVariant, "DecoderLayer", cross_q_from_memory=True)),
    Mutant("masks_swapped", "the masks are swapped: tgt_mask (causal) goes to the self-attention, src_mask (source padding) to the cross-attention.",
           _variant(_DecoderVariant, "DecoderLayer", swap_masks=True)),
    Mutant("tgt_mask_ignored", "tgt_mask was not passed to the self-attention, so each position sees the future: self_attn(h, h, h, tgt_mask).",
           _variant(_DecoderVariant, "DecoderLayer", ignore_masks=("tgt",))),
    Mutant("src_mask_ignored", "src_mask was not passed to the cross-attention, so padded source tokens get weight: cross_attn(h, memory, memory, src_mask).",
           _variant(_DecoderVariant, "DecoderLayer", ignore_masks=("src",))),
    Mutant("returns_self_weights", "the layer returned the self-attention weights; return the cross-attention weights (B, H, S_t, S_s).",
           _variant(_DecoderVariant, "DecoderLayer", return_self_weights=True)),
    Mutant("memory_normalised", "memory was passed through norm2: in a pre-norm layer only the decoder stream is normalised (the encoder normalises its own output); use memory as it is for keys and values.",
           _variant(_DecoderVariant, "DecoderLayer", normalise_memory=True)),
    Mutant("residual_from_normalised_stream", "the residual connection adds the sub-layer's output to the normalised stream (norm(x) + sublayer(norm(x))); pre-norm keeps the un-normalised stream: x = x + sublayer(norm(x)).",
           _variant(_DecoderVariant, "DecoderLayer", residual_from_normalised=True)),
    Mutant("causal_mask_on_cross_attention", "a causal mask was also applied to the cross-attention: the whole source exists before decoding, so the cross-attention uses only the source padding mask (src_mask); the causal tgt_mask belongs to the self-attention.",
           _variant(_DecoderVariant, "DecoderLayer", cross_causal=True)),
    Mutant("one_norm_for_all", "the same LayerNorm (norm1) was used before every sub-layer: each sub-layer has its own, norm1, norm2, norm3.",
           _variant(_DecoderVariant, "DecoderLayer", one_norm=True)),
]


# Correct answers written differently: they must pass. A learner's DecoderLayer is built on the
# learner's own MultiHeadAttention, FeedForward and LayerNorm; these are written from scratch here.
class _VMultiHeadAttention(nn.Module):
    """einsum heads, W_o created first, masked_fill with the dtype's lowest value, rows zeroed by where."""

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        assert d_model % num_heads == 0, "d_model must be divisible by num_heads"
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.h = num_heads
        self.drop = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        B, S_q, d = query.shape
        S_k = key.size(1)
        q = self.W_q(query).reshape(B, S_q, self.h, -1)  # (B, S_q, H, D_h)
        k = self.W_k(key).reshape(B, S_k, self.h, -1)
        v = self.W_v(value).reshape(B, S_k, self.h, -1)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.size(-1))  # (B, H, S_q, S_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        w = torch.softmax(scores, dim=-1)
        if mask is not None:
            w = torch.where(mask.expand_as(w).any(dim=-1, keepdim=True), w, torch.zeros_like(w))
        out = torch.einsum("bhqk,bkhd->bqhd", self.drop(w), v).reshape(B, S_q, d)
        return self.W_o(out), w


class _VLayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return self.weight * (x - mean) * torch.rsqrt(var + self.eps) + self.bias


class _VDecoderOwnParts(nn.Module):
    """The learner's own parts, created in another order; residuals written as sub-layer helpers."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.norm3, self.norm2, self.norm1 = (_VLayerNorm(d_model) for _ in range(3))
        self.ffn = _VFeedForwardFunctional(d_model, d_ff, dropout)
        self.cross_attn = _VMultiHeadAttention(d_model, num_heads, dropout)
        self.self_attn = _VMultiHeadAttention(d_model, num_heads, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        h = self.norm1(x)
        x = x + self.drop(self.self_attn(h, h, h, mask=tgt_mask)[0])
        attn, cross = self.cross_attn(self.norm2(x), memory, memory, mask=src_mask)
        x = x + self.drop(attn)
        return x + self.drop(self.ffn(self.norm3(x))), cross


class _VDecoderFloat64(nn.Module):
    """The parts in float64 inside, the result cast back; no separate dropout module (F.dropout)."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.p = dropout
        self.self_attn = _VMultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attn = _VMultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = _VFeedForwardEinsum(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = _VLayerNormFloat64(d_model), _VLayerNormFloat64(d_model), _VLayerNormFloat64(d_model)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        dtype = x.dtype
        self.double()
        try:
            x, memory = x.double(), memory.double()
            def drop(t):
                return F.dropout(t, self.p, training=self.training)

            h = self.norm1(x)
            x = x + drop(self.self_attn(h, h, h, tgt_mask)[0])
            a, w = self.cross_attn(self.norm2(x), memory, memory, src_mask)
            x = x + drop(a)
            x = x + drop(self.ffn(self.norm3(x)))
        finally:
            self.to(dtype)
        return x.to(dtype), w.to(dtype)


DECODER_EXERCISE = Exercise(
    name="DecoderLayer",
    reference=ref.DecoderLayer,
    make_cases=_decoder_cases,
    kind="class",
    mutants=DECODER_MUTANTS,
    variants=[Variant("own_parts_other_order", _VDecoderOwnParts, demo=True), Variant("float64_inside", _VDecoderFloat64)],
    output_names=("x", "cross_weights"),
    input_names=("x", "memory"),
    contract=Contract("""A pre-norm transformer decoder layer: masked self-attention, cross-attention, feed-forward.

        x = x + dropout(self_attn(norm1(x), norm1(x), norm1(x), tgt_mask))
        x = x + dropout(cross_attn(norm2(x), memory, memory, src_mask))
        x = x + dropout(ffn(norm3(x)))

    Sub-modules, by these names (the check loads its parameters into them by name, e.g.
    self_attn.W_q.weight, ffn.linear1.bias, norm2.weight):
        self_attn, cross_attn: your MultiHeadAttention(d_model, num_heads, dropout)
        ffn: your FeedForward(d_model, d_ff, dropout)
        norm1, norm2, norm3: your LayerNorm(d_model)
    forward(x, memory, src_mask=None, tgt_mask=None):
        x: (B, S_t, d_model) decoder stream; memory: (B, S_s, d_model) encoder output, used as
        it is (not normalised here)
        tgt_mask: bool, broadcastable to (B, H, S_t, S_t), e.g. causal (S_t, S_t); or None
        src_mask: bool, broadcastable to (B, H, S_t, S_s), e.g. padding (B, 1, 1, S_s); or None
        returns x (B, S_t, d_model) and the cross-attention weights (B, H, S_t, S_s)
    A source that is all padding gives zero cross-attention weights. Dropout acts in training
    mode only (the check calls model.eval()).
    """, forbid=(MHA,), grad="x, memory and every parameter", kinds={"x": "tokens", "src_mask": "mask", "tgt_mask": "mask"},
        dropout=DECODER_DROPOUT),
)
check_DecoderLayer = register(DECODER_EXERCISE)
