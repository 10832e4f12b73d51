"""Checks for chapter 11 — linear attention."""
import math

import torch
import torch.nn.functional as F

from .. import reference as ref
from ._core import Case, CheckFailure, Exercise, Mutant, compare, generator, largest_tensor, randn, rng
from ._registry import register

__all__ = ["check_elu_feature_map", "check_linear_attention", "check_causal_linear_attention"]


# ---------------------------------------------------------------- elu_feature_map
def _phi_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, x):
        cases.append(Case(f"{label}: x {tuple(x.shape)}", (x,)))

    add("a vector", randn(7, gen=g))
    add("(B, H, S, D)", randn(2, 3, 5, 4, gen=g))
    add("a single element", randn(1, 1, gen=g))
    add("zeros (φ(0) = 1)", torch.zeros(3, 4))
    add("exact values around 0", torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0]))
    add("large-magnitude inputs", randn(4, 8, gen=g, scale=30.0))
    add("all negative", -randn(3, 6, gen=g).abs() - 0.1)
    for i in range(5):  # random shapes
        shape = tuple(r.randint(1, 6) for _ in range(r.randint(1, 4)))
        add(f"random case {i + 1}", randn(*shape, gen=g, scale=r.choice([1.0, 3.0])))
    return cases


def _phi_relu(x):
    return F.relu(x)


def _phi_elu(x):
    return F.elu(x)


def _phi_elu_shifted_input(x):
    return F.elu(x + 1)


def _phi_exp(x):
    return torch.exp(x)


RELU = "relu was used as the feature map: φ(x) = elu(x) + 1, which is positive everywhere (relu is 0 for every x ≤ 0)."
ELU_NO_PLUS_ONE = "the + 1 is missing: elu(x) alone is negative for x < 0; φ(x) = elu(x) + 1 is positive everywhere."

PHI_MUTANTS = [
    Mutant("relu", RELU, _phi_relu),
    Mutant("elu_without_plus_one", ELU_NO_PLUS_ONE, _phi_elu),
    Mutant("elu_of_x_plus_one", "the + 1 went inside: elu(x + 1) is not elu(x) + 1; add 1 after the elu.", _phi_elu_shifted_input),
    Mutant("exp", "exp(x) was used: φ(x) = elu(x) + 1 equals exp(x) only for x ≤ 0; for x > 0 it is x + 1.", _phi_exp),
]

PHI_EXERCISE = Exercise(
    name="elu_feature_map",
    reference=ref.elu_feature_map,
    make_cases=_phi_cases,
    mutants=PHI_MUTANTS,
)
check_elu_feature_map = register(PHI_EXERCISE)


# ---------------------------------------------------------------- shared by both linear attentions
def _phi(x):
    return F.elu(x) + 1.0


def _attention_cases(seed: int, causal: bool) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s_q, s_k, d, d_v, eps=None, scale=1.0):
        q = randn(*lead, s_q, d, gen=g, scale=scale)
        k = randn(*lead, s_k, d, gen=g, scale=scale)
        v = randn(*lead, s_k, d_v, gen=g)
        kwargs = {} if eps is None else {"eps": eps}
        extra = "" if eps is None else f", eps={eps}"
        cases.append(Case(f"{label}: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}{extra}",
                          (q, k, v), kwargs))

    def pair(s):  # S_q = S_k for the causal version, free otherwise
        return (s, s) if causal else (s, r.randint(1, 9))

    add("no batch dims", (), 5, 5, 4, 4)
    add("batch and heads (B, H)", (2, 3), *pair(6), 4, 5)
    add("a single position (S = 1)", (1,), 1, 1, 4, 3)
    add("D ≠ D_v, odd sizes", (3,), 7, 7, 5, 3)
    if not causal:
        add("S_q ≠ S_k", (2,), 3, 8, 4, 4)
        add("a single query, many keys", (2,), 1, 9, 3, 2)
    add("large-magnitude inputs", (2,), 6, 6, 8, 4, scale=10.0)
    # eps = 0.5 is comparable to the normaliser φ(q)·Σφ(k) here, so it shows where eps goes
    add("a large eps (eps matters)", (2,), 5, 5, 2, 3, eps=0.5)
    add("eps = 0", (2,), *pair(4), 3, 3, eps=0.0)
    for i in range(6):  # random shapes
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s = r.randint(1, 12)
        add(f"random case {i + 1}", lead, *pair(s), r.choice([1, 3, 4, 8]), r.randint(1, 6))
    return cases


def _linear(q, k, v, eps=1e-6, phi=_phi, normalise=True, eps_outside=False):
    phi_q, phi_k = phi(q), phi(k)
    num = phi_q @ (phi_k.transpose(-2, -1) @ v)
    if not normalise:
        return num
    den = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)
    return num / den + eps if eps_outside else num / (den + eps)


def _causal(q, k, v, eps=1e-6, phi=_phi, normalise=True, shift=0, causal_den=True, sum_dim=-3):
    phi_q, phi_k = phi(q), phi(k)
    kv = (phi_k.unsqueeze(-1) * v.unsqueeze(-2)).cumsum(dim=sum_dim)  # (..., S, D, D_v)
    z = phi_k.cumsum(dim=sum_dim + 1)  # (..., S, D)
    if shift:  # exclusive prefix sums: keys j < i only
        kv = F.pad(kv, (0, 0, 0, 0, 1, 0))[..., :-1, :, :]
        z = F.pad(z, (0, 0, 1, 0))[..., :-1, :]
    num = (phi_q.unsqueeze(-2) @ kv).squeeze(-2)
    if not normalise:
        return num
    if not causal_den:
        z = phi_k.sum(dim=-2, keepdim=True)
    den = (phi_q * z).sum(dim=-1, keepdim=True)
    return num / (den + eps)


def _materialised(q, k, v, eps=1e-6, causal=False):
    scores = _phi(q) @ _phi(k).transpose(-2, -1)  # (..., S_q, S_k): the matrix linear attention avoids
    if causal:
        scores = scores.tril()
    return (scores @ v) / (scores.sum(dim=-1, keepdim=True) + eps)


MISSING_NORMALISER = "the normaliser is missing: divide φ(q)(φ(k)ᵀv) by φ(q)·Σ_j φ(k_j) + eps, so that the weights on the values sum to 1."
NO_EPS = "eps was not added to the normaliser (or the eps argument was ignored): divide by φ(q)·Σ_j φ(k_j) + eps."
MATERIALISED = (
    "the S×S matrix φ(q)φ(k)ᵀ was built: use associativity, φ(q)(φ(k)ᵀv), so the largest "
    "intermediate is D×D_v (causal: prefix sums of φ(k_j)v_jᵀ), never S×S."
)

LINEAR_MUTANTS = [
    Mutant("missing_normaliser", MISSING_NORMALISER, lambda q, k, v, eps=1e-6: _linear(q, k, v, eps, normalise=False)),
    Mutant("relu_feature_map", RELU, lambda q, k, v, eps=1e-6: _linear(q, k, v, eps, phi=F.relu)),
    Mutant("elu_without_plus_one", ELU_NO_PLUS_ONE, lambda q, k, v, eps=1e-6: _linear(q, k, v, eps, phi=F.elu)),
    Mutant("scaled_by_sqrt_d", "q was divided by sqrt(D) as in softmax attention: linear attention applies φ to q and k as they are.",
           lambda q, k, v, eps=1e-6: _linear(q / math.sqrt(q.size(-1)), k, v, eps)),
    Mutant("no_eps", NO_EPS, lambda q, k, v, eps=1e-6: _linear(q, k, v, 0.0)),
    Mutant("eps_outside", "eps was added after the division: it belongs in the normaliser, num / (φ(q)·Σφ(k) + eps).",
           lambda q, k, v, eps=1e-6: _linear(q, k, v, eps, eps_outside=True)),
    Mutant("materialised_scores", MATERIALISED, _materialised),
]

# small D, D_v keep S·D·D_v (the causal prefix sums) under ~32k elements, so torch stays on one
# thread and the check is fast even on a busy machine; the S×S matrix is 4M elements either way
MEMORY_S, MEMORY_D, MEMORY_D_V = 2048, 4, 3


def _memory_check(name, reference_fn):
    def check(fn) -> None:
        """At S = 2048 no tensor may hold S²/4 elements or more (linear attention: ~S·D·D_v)."""
        S, D, D_v = MEMORY_S, MEMORY_D, MEMORY_D_V
        g = generator(2048)
        q, k, v = randn(1, S, D, gen=g), randn(1, S, D, gen=g), randn(1, S, D_v, gen=g)
        limit = S * S // 4
        out, numel, shape, op = largest_tensor(fn, q, k, v)
        where = f"memory check (q, k {tuple(q.shape)}, v {tuple(v.shape)})"
        if numel >= limit:
            raise CheckFailure(
                f"{where}: {name} built a tensor of shape {shape} ({numel:,} elements, from {op}); "
                f"linear attention needs far fewer than S²/4 = {limit:,}. Likely mistake: {MATERIALISED}"
            )
        # sums over 2048 positions: float32 round-off depends on the order of summation (cumsum,
        # a Python loop, matmul), so compare loosely; the small cases above check the values tightly
        msg = compare(reference_fn(q, k, v), out, 1e-4, 1e-3)
        if msg:
            raise CheckFailure(f"{where}: {msg}")

    return check


LINEAR_EXERCISE = Exercise(
    name="linear_attention",
    reference=ref.linear_attention,
    make_cases=lambda seed: _attention_cases(seed, causal=False),
    mutants=LINEAR_MUTANTS,
    extra_checks=(_memory_check("linear_attention", ref.linear_attention.__wrapped__),),
)
check_linear_attention = register(LINEAR_EXERCISE)


# ---------------------------------------------------------------- causal_linear_attention
CAUSAL_MUTANTS = [
    Mutant("includes_future", "every position used all keys, the future included: position i may use only keys j ≤ i (prefix sums, or one RNN step per token).",
           lambda q, k, v, eps=1e-6: _linear(q, k, v, eps)),
    Mutant("excludes_current", "the current token was left out: position i uses keys j ≤ i, itself included (an inclusive prefix sum; in the RNN form, update the state before reading it).",
           lambda q, k, v, eps=1e-6: _causal(q, k, v, eps, shift=1)),
    Mutant("missing_normaliser", MISSING_NORMALISER.replace("Σ_j", "Σ_{j≤i}"), lambda q, k, v, eps=1e-6: _causal(q, k, v, eps, normalise=False)),
    Mutant("normaliser_not_causal", "the normaliser summed φ(k_j) over all keys: it needs the same prefix sum as the numerator, z_i = Σ_{j≤i} φ(k_j).",
           lambda q, k, v, eps=1e-6: _causal(q, k, v, eps, causal_den=False)),
    Mutant("cumsum_wrong_dim", "the prefix sums ran over the feature dim instead of the sequence dim: cumsum over S (dim -3 of φ(k_j)v_jᵀ (..., S, D, D_v), dim -2 of φ(k) (..., S, D)).",
           lambda q, k, v, eps=1e-6: _causal(q, k, v, eps, sum_dim=-2)),
    Mutant("elu_without_plus_one", ELU_NO_PLUS_ONE, lambda q, k, v, eps=1e-6: _causal(q, k, v, eps, phi=F.elu)),
    Mutant("no_eps", NO_EPS, lambda q, k, v, eps=1e-6: _causal(q, k, v, 0.0)),
    Mutant("materialised_scores", MATERIALISED, lambda q, k, v, eps=1e-6: _materialised(q, k, v, eps, causal=True)),
]

CAUSAL_EXERCISE = Exercise(
    name="causal_linear_attention",
    reference=ref.causal_linear_attention,
    make_cases=lambda seed: _attention_cases(seed, causal=True),
    mutants=CAUSAL_MUTANTS,
    extra_checks=(_memory_check("causal_linear_attention", ref.causal_linear_attention.__wrapped__),),
)
check_causal_linear_attention = register(CAUSAL_EXERCISE)
