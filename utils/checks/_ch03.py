"""Checks for chapter 03 — scaled dot-product attention."""
import math

import torch

from .. import reference as ref
from ._core import Case, CheckFailure, Exercise, Mutant, generator, randn, random_padding_mask, rng
from ._forbid import MHA, SDPA
from ._registry import register

__all__ = ["check_scaled_dot_product_attention", "check_dot_product_variance"]


# ---------------------------------------------------------------- scaled_dot_product_attention
def _sdpa_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s_q, s_k, d, d_v, mask=None, scale=1.0):
        q = randn(*lead, s_q, d, gen=g, scale=scale)
        k = randn(*lead, s_k, d, gen=g, scale=scale)
        v = randn(*lead, s_k, d_v, gen=g)
        dims = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        if mask is not None:
            dims += f", mask {tuple(mask.shape)}"
        cases.append(Case(f"{label}: {dims}", (q, k, v), {"mask": mask} if mask is not None else {}))

    add("no batch dims, S_q = S_k", (), 4, 4, 8, 8)
    add("S_q ≠ S_k, D ≠ D_v", (2,), 3, 6, 5, 7)
    add("a single query and key (S = 1)", (1,), 1, 1, 4, 3)
    add("batch and heads (B, H)", (2, 3), 5, 7, 4, 6)
    add("large-magnitude inputs", (2,), 5, 5, 16, 4, scale=30.0)
    add("mask: some keys hidden", (2,), 4, 6, 8, 8, mask=random_padding_mask(2, 4, 6, g))
    add("mask with a fully masked query row", (2,), 4, 5, 8, 3,
        mask=random_padding_mask(2, 4, 5, g, fully_masked_row=True))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    add("causal mask broadcast over (B, H)", (2, 2), 5, 5, 4, 4, mask=causal)
    key_pad = torch.ones(3, 1, 1, 6, dtype=torch.bool)
    key_pad[1, ..., 4:] = False
    add("padding mask (B, 1, 1, S_k) over heads", (3, 2), 4, 6, 4, 5, mask=key_pad)
    for i in range(7):  # random shapes, odd sizes included
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s_q, s_k, d, d_v = r.randint(1, 9), r.randint(1, 9), r.choice([1, 3, 4, 8, 17]), r.randint(1, 6)
        m = None
        if i % 2:
            m = torch.rand(*lead, s_q, s_k, generator=g) > 0.4
            m[..., 0] = True
        add(f"random case {i + 1}", lead, s_q, s_k, d, d_v, mask=m)
    return cases


def _no_scaling(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, scale=1.0)


def _scale_by_d(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, scale=1.0 / q.size(-1))


def _scale_by_d_v(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, scale=1.0 / math.sqrt(v.size(-1)))


def _softmax_wrong_dim(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, dim=-2)


def _mask_after_softmax(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    w = torch.softmax(scores, dim=-1)
    if mask is not None:
        w = w * mask
    return w @ v, w


def _inverted_mask(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, None if mask is None else ~mask)


def _neg_1e9(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, fill=-1e9)


def _nan_rows(q, k, v, mask=None, dropout_p=0.0):
    return _sdpa_variant(q, k, v, mask, fill=float("-inf"))


def _sdpa_variant(q, k, v, mask, scale=None, dim=-1, fill=None):
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None and fill is not None:
        w = torch.softmax(scores.masked_fill(~mask, fill), dim=dim)
    elif mask is not None:
        w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim).nan_to_num(0.0)
    else:
        w = torch.softmax(scores, dim=dim)
    return w @ v, w


SDPA_MUTANTS = [
    Mutant("no_scaling", "the scores were not divided by sqrt(d_k).", _no_scaling),
    Mutant("scale_by_d", "the scores were divided by d_k instead of sqrt(d_k).", _scale_by_d),
    Mutant("scale_by_d_v", "the scores were divided by sqrt(D_v) (the size of v) instead of sqrt(d_k) (the size of q and k).", _scale_by_d_v),
    Mutant("softmax_wrong_dim", "the softmax was taken over the query dim (-2) instead of the key dim (-1): each row of weights must sum to 1.", _softmax_wrong_dim),
    Mutant("mask_after_softmax", "the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores with -inf before the softmax.", _mask_after_softmax),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend', so fill the scores where the mask is False.", _inverted_mask),
    Mutant("neg_1e9_fully_masked", "a fully masked row got uniform weights: filling with -1e9 (or a large negative number) spreads the weight evenly when every key is masked; such a row must give zero weights and a zero output.", _neg_1e9),
    Mutant("nan_fully_masked", "a fully masked row gave NaN: softmax over a row of -inf is 0/0; replace those rows with zeros (e.g. nan_to_num or torch.where).", _nan_rows),
]

DROPOUT_NOT_RESCALED = "dropout zeroed weights but did not rescale the kept ones by 1/(1 - dropout_p)."
DROPOUT_IGNORED = "dropout_p > 0 was ignored: no attention weight was dropped."


def _check_dropout(fn) -> None:
    """With dropout_p = 0.5: about half the weights are zero and row sums stay 1 on average."""
    g = generator(1234)
    q, k = randn(2, 64, 8, gen=g), randn(2, 64, 8, gen=g)
    v = torch.ones(2, 64, 1)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        result = fn(q, k, v, dropout_p=0.5)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailure("with dropout_p=0.5, scaled_dot_product_attention should still return (out, weights).")
    out, w = result
    zero_frac = (w == 0).float().mean().item()
    if zero_frac < 0.05:
        raise CheckFailure(f"dropout check (q, k (2, 64, 8), dropout_p=0.5): {DROPOUT_IGNORED}")
    mean_row_sum = out.mean().item()  # v is all ones, so out = row sums of the dropped weights
    if abs(mean_row_sum - 1.0) > 0.1:
        hint = DROPOUT_NOT_RESCALED if abs(mean_row_sum - 0.5) < 0.1 else "the kept weights should be rescaled by 1/(1 - dropout_p)."
        raise CheckFailure(
            f"dropout check (q, k (2, 64, 8), dropout_p=0.5): the weight rows sum to {mean_row_sum:.3f} "
            f"on average, expected about 1. Likely mistake: {hint}"
        )


def _dropout_not_rescaled(q, k, v, mask=None, dropout_p=0.0):
    out, w = ref.scaled_dot_product_attention.__wrapped__(q, k, v, mask)
    if dropout_p > 0:
        w = w * (torch.rand_like(w) >= dropout_p)
    return w @ v, w


def _dropout_ignored(q, k, v, mask=None, dropout_p=0.0):
    return ref.scaled_dot_product_attention.__wrapped__(q, k, v, mask)


SDPA_DROPOUT_MUTANTS = [
    Mutant("dropout_not_rescaled", DROPOUT_NOT_RESCALED, _dropout_not_rescaled),
    Mutant("dropout_ignored", DROPOUT_IGNORED, _dropout_ignored),
]

SDPA_EXERCISE = Exercise(
    name="scaled_dot_product_attention",
    reference=ref.scaled_dot_product_attention,
    make_cases=_sdpa_cases,
    forbidden=(SDPA, MHA),
    mutants=SDPA_MUTANTS + SDPA_DROPOUT_MUTANTS,
    output_names=("out", "weights"),
    extra_checks=(_check_dropout,),
)
check_scaled_dot_product_attention = register(SDPA_EXERCISE)


# ---------------------------------------------------------------- dot_product_variance
N_SAMPLES = 20_000


def _variance_cases(seed: int) -> list:
    r = rng(seed)
    dims = [1, 4, 16, 64, 256] + [r.choice([2, 8, 32, 100, 128]) for _ in range(1)]
    cases = []
    for d_k in dims:
        for scaled in (False, True):
            # var(q·k) = d_k; the sample variance has std ≈ sqrt((2 d_k² + 6 d_k) / N). Two
            # independent estimates (yours, the reference's) differ by √2 times that: allow 6 σ.
            sigma = math.sqrt((2 * d_k**2 + 6 * d_k) / N_SAMPLES) / d_k
            cases.append(Case(f"d_k={d_k}, n_samples={N_SAMPLES}, scaled={scaled}",
                              (d_k, N_SAMPLES, scaled), tol=(0.0, 6 * math.sqrt(2) * sigma)))
    return cases


def _var_scale_by_d(d_k, n_samples, scaled):
    v = ref.dot_product_variance.__wrapped__(d_k, n_samples, False)
    return v / d_k**2 if scaled else v


def _var_returns_std(d_k, n_samples, scaled):
    return math.sqrt(ref.dot_product_variance.__wrapped__(d_k, n_samples, scaled))


def _var_ignores_flag(d_k, n_samples, scaled):
    return ref.dot_product_variance.__wrapped__(d_k, n_samples, False)


def _var_uniform(d_k, n_samples, scaled):
    q, k = torch.rand(n_samples, d_k), torch.rand(n_samples, d_k)
    dots = (q * k).sum(-1) / (math.sqrt(d_k) if scaled else 1.0)
    return dots.var().item()


def _var_mean_square_of_sum(d_k, n_samples, scaled):
    q, k = torch.randn(n_samples, d_k), torch.randn(n_samples, d_k)
    dots = (q * k).sum(-1) / (math.sqrt(d_k) if scaled else 1.0)
    return dots.mean().item()


VARIANCE_MUTANTS = [
    Mutant("scale_by_d", "with scaled=True you divided q·k by d_k, which divides the variance by d_k²; divide by sqrt(d_k).", _var_scale_by_d),
    Mutant("returns_std", "you returned the standard deviation (sqrt of the variance).", _var_returns_std),
    Mutant("ignores_scaled", "the `scaled` flag is ignored: with scaled=True divide each q·k by sqrt(d_k).", _var_ignores_flag),
    Mutant("uniform_samples", "q and k were drawn from a uniform distribution (torch.rand); the exercise uses standard normals (torch.randn).", _var_uniform),
    Mutant("returns_mean", "you returned the mean of q·k (about 0), not its variance.", _var_mean_square_of_sum),
]

VARIANCE_EXERCISE = Exercise(
    name="dot_product_variance",
    reference=ref.dot_product_variance,
    make_cases=_variance_cases,
    mutants=VARIANCE_MUTANTS,
)
check_dot_product_variance = register(VARIANCE_EXERCISE)
