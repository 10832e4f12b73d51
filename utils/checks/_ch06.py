"""Checks for chapter 06 — cross-attention and the transformer block."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import reference as ref
from .._guard import ForbiddenCall, unguarded
from ._ch05 import random_state
from ._core import Case, CheckFailure, Exercise, Mutant, compare, generator, randn, rng, run_module
from ._forbid import LAYERNORM, MHA
from ._registry import register

__all__ = ["check_LayerNorm", "check_FeedForward", "check_DecoderLayer"]


def _variant(base, name, **attrs):
    return type(name, (base,), attrs)


def _ctor_label(name, ctor, ctor_kwargs) -> str:
    args = [repr(a) for a in ctor] + [f"{k}={v!r}" for k, v in ctor_kwargs.items()]
    return f"{name}({', '.join(args)})"


# ---------------------------------------------------------------- LayerNorm
def _layernorm_state(d: int, g: torch.Generator) -> dict:
    """weight ≈ 1 ± 0.5 and bias ≈ 0 ± 0.5, so a missing or swapped affine part shows."""
    return {"weight": 1.0 + randn(d, gen=g, scale=0.5), "bias": randn(d, gen=g, scale=0.5)}


def _layernorm_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, x, eps=None, tol=None):
        d = x.shape[-1]
        ctor_kwargs = {} if eps is None else {"eps": eps}
        init = {"ctor": (d,), "ctor_kwargs": ctor_kwargs, "seed": seed, "state": _layernorm_state(d, g)}
        cases.append(Case(f"{label}: x {tuple(x.shape)}, {_ctor_label('LayerNorm', (d,), ctor_kwargs)}",
                          (x,), init=init, tol=tol))

    add("(B, S, d_model)", randn(2, 5, 8, gen=g))
    add("(N, d_model), odd d_model", randn(6, 7, gen=g, scale=2.0))
    add("(B, H, S, d) leading dims", randn(2, 3, 4, 5, gen=g))
    add("d_model = 2", randn(3, 4, 2, gen=g))
    add("a single position (S = 1)", randn(3, 1, 16, gen=g))
    add("eps = 0.1 (eps is visible)", randn(2, 4, 6, gen=g), eps=0.1)
    add("eps = 1e-2, small inputs", randn(2, 3, 9, gen=g, scale=0.1), eps=1e-2)
    add("tiny inputs (std 1e-3): eps dominates the variance", randn(2, 5, 8, gen=g, scale=1e-3))
    x = randn(2, 4, 6, gen=g)
    x[0, 1] = 3.0  # a constant row: variance 0, output = bias
    x[1, 2] = -1.5
    add("constant rows (variance 0)", x)
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
    return cases


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

    def forward(self, x):
        mean = x.mean(self.dim, keepdim=True)
        if self.one_pass:
            var = (x * x).mean(self.dim, keepdim=True) - mean * mean
        else:
            var = x.var(self.dim, keepdim=True, unbiased=self.unbiased)
        eps = self.eps if self.use_eps else 0.0
        y = (x - mean) / (var.sqrt() + eps) if self.eps_outside else (x - mean) / (var + eps).sqrt()
        return self.weight * y + self.bias if self.affine else y


LAYERNORM_MUTANTS = [
    Mutant("std_based", "this is the `a * (x - mean) / (x.std() + eps) + b` variant: x.std() is the unbiased std (divides by d_model - 1) and eps is added to the std; nn.LayerNorm uses the biased variance and sqrt(var + eps).",
           _LayerNormStdBased),
    Mutant("unbiased_variance", "the variance is unbiased (divided by d_model - 1): LayerNorm uses the biased variance, var(unbiased=False) or mean((x - mean)²).",
           _variant(_LayerNormVariant, "LayerNorm", unbiased=True)),
    Mutant("eps_outside_sqrt", "eps was added to the std instead of the variance: divide by sqrt(var + eps), not sqrt(var) + eps.",
           _variant(_LayerNormVariant, "LayerNorm", eps_outside=True)),
    Mutant("no_eps", "eps is missing: a constant row (variance 0) gives 0 / 0 = NaN; divide by sqrt(var + eps).",
           _variant(_LayerNormVariant, "LayerNorm", use_eps=False)),
    Mutant("wrong_dim", "the statistics were taken over dim -2 (the positions) instead of the last dim: LayerNorm normalises each position's d_model features (dim=-1, keepdim=True).",
           _variant(_LayerNormVariant, "LayerNorm", dim=-2)),
    Mutant("missing_weight_bias", "the learned scale and shift are missing: return weight * x_hat + bias.",
           _variant(_LayerNormVariant, "LayerNorm", affine=False)),
    Mutant("one_pass_variance", "the variance was computed as E[x²] - E[x]², which cancels catastrophically when the mean is large compared with the std: use mean((x - mean)²).",
           _variant(_LayerNormVariant, "LayerNorm", one_pass=True)),
]

check_LayerNorm = register(Exercise(
    name="LayerNorm",
    reference=ref.LayerNorm,
    make_cases=_layernorm_cases,
    kind="class",
    forbidden=(LAYERNORM,),
    mutants=LAYERNORM_MUTANTS,
))


# ---------------------------------------------------------------- FeedForward
def _ffn_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, d_model, d_ff, dropout=0.0, scale=1.0):
        module = unguarded(ref.FeedForward)(d_model, d_ff)
        x = randn(*lead, d_model, gen=g, scale=scale)
        ctor_kwargs = {"dropout": dropout} if dropout else {}
        init = {"ctor": (d_model, d_ff), "ctor_kwargs": ctor_kwargs, "seed": seed, "state": random_state(module, g)}
        cases.append(Case(f"{label}: x {tuple(x.shape)}, {_ctor_label('FeedForward', (d_model, d_ff), ctor_kwargs)}",
                          (x,), init=init))

    add("(B, S, d_model), d_ff = 4 d_model", (2, 5), 8, 32)
    add("d_ff < d_model", (2, 3), 12, 5)
    add("(N, d_model)", (7,), 6, 16)
    add("(B, H, S, d) leading dims", (2, 2, 3), 4, 9)
    add("a single position (S = 1)", (3, 1), 8, 8)
    add("odd sizes", (1, 7), 5, 11)
    add("dropout=0.5 in eval mode", (2, 4), 8, 24, dropout=0.5)
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

    def act(self, h):
        return {"relu": F.relu, "gelu": F.gelu, "none": lambda t: t}[self.activation](h)

    def forward(self, x):
        h = self.linear1(x)
        if self.placement in ("between", "both"):
            h = self.act(h)
        h = F.dropout(h, self.dropout.p, training=True) if self.dropout_always else self.dropout(h)
        y = self.linear2(h)
        return self.act(y) if self.placement in ("after", "both") else y


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
]

check_FeedForward = register(Exercise(
    name="FeedForward",
    reference=ref.FeedForward,
    make_cases=_ffn_cases,
    kind="class",
    mutants=FFN_MUTANTS,
))


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


def _decoder_case(label, g, seed, B, s_t, s_s, d, H, d_ff, src_mask=None, tgt_mask=None, dropout=0.0, scale=1.0):
    module = unguarded(ref.DecoderLayer)(d, H, d_ff)
    x = randn(B, s_t, d, gen=g, scale=scale)
    memory = randn(B, s_s, d, gen=g, scale=scale)
    kwargs, dims = {}, f"x {tuple(x.shape)}, memory {tuple(memory.shape)}"
    if src_mask is not None:
        kwargs["src_mask"] = src_mask
        dims += f", src_mask {tuple(src_mask.shape)}"
    if tgt_mask is not None:
        kwargs["tgt_mask"] = tgt_mask
        dims += f", tgt_mask {tuple(tgt_mask.shape)}"
    ctor_kwargs = {"dropout": dropout} if dropout else {}
    dims += ", " + _ctor_label("DecoderLayer", (d, H, d_ff), ctor_kwargs)
    init = {"ctor": (d, H, d_ff), "ctor_kwargs": ctor_kwargs, "seed": seed, "state": _decoder_state(module, g)}
    return Case(f"{label}: {dims}", (x, memory), kwargs, init=init)


def _causal(s):
    return torch.ones(s, s, dtype=torch.bool).tril()


def _decoder_cases(seed: int) -> list:
    # Cases with a mask have S_t = S_s, so that a layer that mixes up the two masks still runs
    # (and is named); the extra check covers masks with S_t ≠ S_s.
    r, g = rng(seed), generator(seed)
    cases = []

    def add(*args, **kwargs):
        cases.append(_decoder_case(args[0], g, seed, *args[1:], **kwargs))

    add("no masks, S_t ≠ S_s", 2, 4, 6, 8, 2, 16)
    add("causal tgt_mask only", 2, 5, 5, 8, 2, 16, tgt_mask=_causal(5))
    add("src padding mask only", 3, 5, 5, 8, 2, 12, src_mask=_padding(3, 5, g))
    add("both masks", 2, 6, 6, 12, 3, 24, src_mask=_padding(2, 6, g), tgt_mask=_causal(6))
    add("a source that is all padding", 3, 4, 4, 8, 4, 8, src_mask=_padding(3, 4, g, pad_all=True), tgt_mask=_causal(4))
    add("one target position (a decoding step)", 2, 1, 7, 8, 2, 16)
    add("one source position", 2, 5, 1, 6, 3, 10)
    add("a single head (H = 1)", 2, 3, 5, 6, 1, 12)
    add("odd sizes, D_h = 3", 1, 3, 7, 15, 5, 9)
    add("dropout=0.2 in eval mode", 2, 4, 4, 8, 2, 16, src_mask=_padding(2, 4, g), tgt_mask=_causal(4), dropout=0.2)
    add("larger inputs", 2, 4, 6, 8, 2, 16, scale=5.0)
    for i in range(3):
        H, d_h = r.choice([1, 2, 4]), r.choice([2, 3])
        B, s_t = r.randint(1, 3), r.randint(1, 6)
        if i % 2:
            add(f"random case {i + 1}", B, s_t, s_t, H * d_h, H, r.choice([4, 16, 20]),
                src_mask=_padding(B, s_t, g), tgt_mask=_causal(s_t))
        else:
            add(f"random case {i + 1}", B, s_t, r.randint(1, 7), H * d_h, H, r.choice([4, 16, 20]))
    return cases


def _check_masks_with_different_lengths(cls) -> None:
    """Both masks at once with S_t ≠ S_s: tgt_mask (S_t, S_t) on self-attention, src_mask (B, 1, 1, S_s) on cross."""
    g = generator(606)
    case = _decoder_case("both masks, S_t ≠ S_s", g, 606, 2, 3, 5, 8, 2, 16,
                         src_mask=_padding(2, 5, g), tgt_mask=_causal(3))
    torch.manual_seed(0)
    expected = run_module(unguarded(ref.DecoderLayer), case)
    torch.manual_seed(0)
    try:
        got = run_module(cls, case)
    except (CheckFailure, ForbiddenCall):
        raise
    except Exception as err:  # noqa: BLE001
        raise CheckFailure(
            f"DecoderLayer raised {type(err).__name__} on case [{case.label}]: {err}. tgt_mask goes to "
            "the self-attention (S_t × S_t scores), src_mask to the cross-attention (S_t × S_s scores)."
        ) from err
    msg = compare(expected, got, 1e-5, 1e-4)
    if msg:
        msg = msg.replace("output[0]", "x").replace("output[1]", "cross_weights")
        raise CheckFailure(f"DecoderLayer failed case [{case.label}]: {msg}")


_DecoderLayer = unguarded(ref.DecoderLayer)


class _DecoderVariant(_DecoderLayer):
    post_norm = False
    residual = ("self", "cross", "ffn")
    cross_kv = "memory"  # "memory" (correct), "x": keys and values from the decoder stream
    swap_masks = False
    return_self_weights = False
    normalise_memory = False
    one_norm = False

    def _sub(self, name, norm, x, f):
        """One residual sub-layer: pre-norm x + f(norm(x)) (or post-norm norm(x + f(x)))."""
        y = f(x) if self.post_norm else f(norm(x))
        out = x + y if name in self.residual else y
        return norm(out) if self.post_norm else out

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        if self.swap_masks:
            src_mask, tgt_mask = tgt_mask, src_mask
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
            a, found["cross"] = self.cross_attn(h, kv, kv, src_mask)
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
    Mutant("masks_swapped", "the masks are swapped: tgt_mask (causal) goes to the self-attention, src_mask (source padding) to the cross-attention.",
           _variant(_DecoderVariant, "DecoderLayer", swap_masks=True)),
    Mutant("returns_self_weights", "the layer returned the self-attention weights; return the cross-attention weights (B, H, S_t, S_s).",
           _variant(_DecoderVariant, "DecoderLayer", return_self_weights=True)),
    Mutant("memory_normalised", "memory was passed through norm2: in a pre-norm layer only the decoder stream is normalised (the encoder normalises its own output); use memory as it is for keys and values.",
           _variant(_DecoderVariant, "DecoderLayer", normalise_memory=True)),
    Mutant("one_norm_for_all", "the same LayerNorm (norm1) was used before every sub-layer: each sub-layer has its own, norm1, norm2, norm3.",
           _variant(_DecoderVariant, "DecoderLayer", one_norm=True)),
]

check_DecoderLayer = register(Exercise(
    name="DecoderLayer",
    reference=ref.DecoderLayer,
    make_cases=_decoder_cases,
    kind="class",
    forbidden=(MHA,),
    mutants=DECODER_MUTANTS,
    output_names=("x", "cross_weights"),
    extra_checks=(_check_masks_with_different_lengths,),
))
