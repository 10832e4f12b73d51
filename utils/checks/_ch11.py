"""Checks for chapter 11 — linear attention."""
import math

import torch
import torch.nn.functional as F

from .. import reference as ref
from ._contract import Contract, Cost
from ._core import Case, Exercise, Mutant, Variant, generator, randn, rng
from ._guards import DTYPE
from ._registry import register

__all__ = ["check_elu_feature_map", "check_linear_attention", "check_causal_linear_attention"]

F64 = torch.float64


# ---------------------------------------------------------------- elu_feature_map
def _phi_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, x, grad=False):
        cases.append(Case(f"{label}: x {tuple(x.shape)}", (x,), grad=grad))

    add("a vector", randn(7, gen=g))
    add("(B, H, S, D)", randn(2, 3, 5, 4, gen=g))
    add("exact values around 0", torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0]))
    add("all negative", -randn(3, 6, gen=g).abs() - 0.1)
    add("a single element", randn(1, 1, gen=g))
    add("zeros (φ(0) = 1)", torch.zeros(3, 4))
    add("large-magnitude inputs (|x| ~ 30)", randn(4, 8, gen=g, scale=30.0))
    add("float64 input", randn(2, 5, gen=g, dtype=F64))
    # exp(x) overflows to inf above x ≈ 88.7 in float32 (709.8 in float64): a φ that computes exp(x)
    # on every x and then selects (exp(x) · (x ≤ 0) + ...) gets inf · 0 = NaN there
    add("|x| beyond float32's exp range (x = ±100, ±1000)",
        torch.tensor([[-1000.0, -100.0, -89.0, 0.5, 89.0, 100.0, 1000.0]]))
    add("float64, |x| beyond float64's exp range (x = ±800)",
        torch.tensor([-800.0, -1.0, 1.0, 710.0, 800.0], dtype=F64))
    # gradients (float64): φ'(x) = 1 above 0, exp(x) below. A φ that selects between x + 1 and an
    # exp(x) computed for every x (torch.where) has the right values, but past exp's range the
    # branch it does not pick is inf, and inf · 0 is NaN in the backward pass
    add("gradients (float64) of a random loss", randn(2, 3, 5, gen=g, dtype=F64), grad=True)
    add("gradients (float64) at |x| ≥ 100 and past exp's range (709)",
        torch.tensor([[-1000.0, -710.0, -100.0, -2.0, 0.5, 100.0, 710.0, 800.0, 1000.0]], dtype=F64), grad=True)
    for i in range(4):  # random shapes
        shape = tuple(r.randint(1, 6) for _ in range(r.randint(1, 4)))
        add(f"random case {i + 1}", randn(*shape, gen=g, scale=r.choice([1.0, 3.0])))
    return cases


RELU = "relu was used as the feature map: φ(x) = elu(x) + 1, which is positive everywhere (relu is 0 for every x ≤ 0)."
ELU_NO_PLUS_ONE = "the + 1 is missing: elu(x) alone is negative for x < 0; φ(x) = elu(x) + 1 is positive everywhere."
RELU_PLUS_ONE = ("relu(x) + 1 was used: it equals elu(x) + 1 for x > 0 only; for x ≤ 0, elu(x) + 1 = exp(x), "
                 "which falls smoothly towards 0 (relu(x) + 1 stays at 1).")
NO_ELU = "the elu is missing: x + 1 is negative for x < −1; φ(x) = elu(x) + 1 = exp(x) for x ≤ 0."

EXP_EVERYWHERE = ("exp(x) was computed for every x and the branches combined by multiplying with masks "
                  "(exp(x) · (x ≤ 0) + (x + 1) · (x > 0)): exp(x) overflows to inf for x > 88 in float32 "
                  "(709 in float64), and inf · 0 is NaN; select with torch.where instead, and compute exp only where x ≤ 0 (exp(x.clamp(max=0))), or use F.elu.")
def _phi_exp_everywhere(x):
    return torch.exp(x) * (x <= 0) + (x + 1) * (x > 0)


WHERE_EXP_EVERYWHERE = ("torch.where(x > 0, x + 1, torch.exp(x)) gives the right values, but it computes exp(x) for "
                        "every x: past exp's range (x > 709 in float64, 88 in float32) that branch is inf, and the "
                        "gradient of the branch torch.where does not pick is 0 · inf = NaN; take exp of x.clamp(max=0) "
                        "(or use F.elu), so that no exp overflows.")


def _phi_where_exp_everywhere(x):
    return torch.where(x > 0, x + 1, torch.exp(x))


PHI_MUTANTS = [
    Mutant("relu", RELU, lambda x: F.relu(x)),
    Mutant("elu_without_plus_one", ELU_NO_PLUS_ONE, lambda x: F.elu(x)),
    Mutant("elu_of_x_plus_one", "the + 1 went inside: elu(x + 1) is not elu(x) + 1; add 1 after the elu.",
           lambda x: F.elu(x + 1)),
    Mutant("exp", "exp(x) was used: φ(x) = elu(x) + 1 equals exp(x) only for x ≤ 0; for x > 0 it is x + 1.",
           lambda x: torch.exp(x)),
    Mutant("relu_plus_one", RELU_PLUS_ONE, lambda x: F.relu(x) + 1),
    Mutant("x_plus_one", NO_ELU, lambda x: x + 1),
    Mutant("exp_everywhere_then_select", EXP_EVERYWHERE, _phi_exp_everywhere),
    Mutant("where_with_exp_everywhere", WHERE_EXP_EVERYWHERE, _phi_where_exp_everywhere),
    Mutant("float32_output", DTYPE.format(got="float32", want="float64"), lambda x: F.elu(x.float()) + 1),
    Mutant("float64_output", DTYPE.format(got="float64", want="float32"), lambda x: F.elu(x.double()) + 1),
]


def _v_phi_where(x):
    return torch.where(x > 0, x + 1, torch.exp(x.clamp(max=0)))


def _v_phi_clamps(x):
    return x.clamp(min=0) + torch.exp(x.clamp(max=0))  # x + 1 above 0, exp(x) below


def _v_phi_float64(x):
    return (F.elu(x.double()) + 1.0).to(x.dtype)


PHI_EXERCISE = Exercise(
    name="elu_feature_map",
    reference=ref.elu_feature_map,
    make_cases=_phi_cases,
    mutants=PHI_MUTANTS,
    variants=[Variant("where_exp", _v_phi_where), Variant("clamps", _v_phi_clamps),
              Variant("float64_inside", _v_phi_float64, demo=True)],
    contract=Contract("""The feature map of linear attention: φ(x) = elu(x) + 1, elementwise.

    x: a tensor of any shape.  Returns φ(x), same shape and dtype as x:
    x + 1 where x > 0, exp(x) where x ≤ 0, so φ(x) > 0 everywhere.
    Any x is allowed, far past exp's range too (|x| ≥ 100, beyond 709 in float64), and φ has a
    finite gradient everywhere (1 above 0, exp(x) below; linear attention trains through it).
    """, kinds={"x": "tensor"}, grad="x"),
)
check_elu_feature_map = register(PHI_EXERCISE)


# ---------------------------------------------------------------- shared by both linear attentions
def _phi(x):
    return F.elu(x) + 1.0


# The budget cases: S = 512 and 2048 positions. Small D, D_v keep S·D·D_v (the causal prefix sums)
# under ~32k elements, so torch stays on one thread and the check is fast on a busy machine; the
# S×S matrix is 4M elements at S = 2048 and the budget allows S²/8.
MEMORY_D, MEMORY_D_V = 4, 3
QUADRATIC = (
    "linear attention never builds the S×S matrix φ(q)φ(k)ᵀ: use associativity, φ(q)(φ(k)ᵀv), "
    "so the largest intermediate is D×D_v per batch (causal: prefix sums of φ(k_j)v_jᵀ, S×D×D_v)"
)


def _memory_case(S: int) -> Case:
    g = generator(S)
    q, k, v = randn(1, S, MEMORY_D, gen=g), randn(1, S, MEMORY_D, gen=g), randn(1, S, MEMORY_D_V, gen=g)
    return Case("", (q, k, v))


QUADRATIC_WORK = (
    "linear attention does O(S·D·D_v) work, φ(q)(φ(k)ᵀv): computing φ(q)φ(k)ᵀ, even a few rows at a time (or "
    "only for short inputs), does O(S²·D) multiply-adds; use associativity at every length"
)


def _work_cost() -> Cost:
    return Cost(sizes=({"S": 16}, {"S": 64}, {"S": 512}), build=_memory_case,
                work=lambda S: 4 * S * MEMORY_D * (MEMORY_D_V + 1), work_text="4·S·D·(D_v + 1)",
                setting=f"S_q = S_k = S, D = {MEMORY_D}, D_v = {MEMORY_D_V}; φ(q)φ(k)ᵀ alone is S²·D",
                why=QUADRATIC_WORK, tol=(1e-4, 1e-3))


def _cost(causal: bool) -> Cost:
    # sums over 2048 positions: float32 round-off depends on the order of summation (cumsum, a Python
    # loop, matmul), so compare loosely; the small cases check the values tightly
    return Cost(sizes=({"S": 512}, {"S": 2048}), build=_memory_case, numel=lambda S: S * S // 8,
                numel_text="S²/8", probe={"S": 8192}, probe_bytes=lambda S: S * S,
                probe_text="S² bytes (a quarter of φ(q)φ(k)ᵀ in float32, half of it in float16)",
                setting=f"D = {MEMORY_D}, D_v = {MEMORY_D_V}", why=QUADRATIC, tol=(1e-4, 1e-3))


def _attention_cases(seed: int, causal: bool) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, lead, s_q, s_k, d, d_v, eps=None, scale=1.0, grad=False, dtype=torch.float32):
        q = randn(*lead, s_q, d, gen=g, scale=scale, dtype=dtype)
        k = randn(*lead, s_k, d, gen=g, scale=scale, dtype=dtype)
        v = randn(*lead, s_k, d_v, gen=g, dtype=dtype)
        kwargs = {} if eps is None else {"eps": eps}
        extra = "" if eps is None else f", eps={eps}"
        cases.append(Case(f"{label}: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}{extra}",
                          (q, k, v), kwargs, grad=grad))

    def pair(s):  # S_q = S_k for the causal version, free otherwise
        return (s, s) if causal else (s, r.randint(1, 9))

    add("batch of 2", (2,), *pair(6), 4, 4)
    add("batch and heads (B, H)", (2, 3), *pair(6), 4, 5)
    add("no batch dims", (), 5, 5, 4, 4)
    add("D ≠ D_v, odd sizes", (3,), 7, 7, 5, 3)
    if not causal:
        add("S_q ≠ S_k", (2,), 3, 8, 4, 4)
        add("a single query, many keys", (2,), 1, 9, 3, 2)
        add("S_q = D_v", (2,), 4, 6, 3, 4)
    # eps = 0.5 is comparable to the normaliser φ(q)·Σφ(k) here, so it shows where eps goes
    add("a large eps (eps matters)", (2,), 5, 5, 2, 3, eps=0.5)
    add("gradients (float64) of a random loss of out", (2,), *pair(5), 4, 3, grad=True, dtype=F64)
    add("gradients (float64), batch and heads, eps = 0.5", (2, 2), *pair(4), 3, 2, eps=0.5, grad=True, dtype=F64)
    add("a single position (S = 1)", (1,), 1, 1, 4, 3)
    add("large-magnitude inputs (|x| ~ 10)", (2,), 6, 6, 8, 4, scale=10.0)
    add("eps = 0", (2,), *pair(4), 3, 3, eps=0.0)
    for i in range(4):  # random shapes
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s = r.randint(1, 12)
        add(f"random case {i + 1}", lead, *pair(s), r.choice([1, 3, 4, 8]), r.randint(1, 6))
    return cases


def _linear(q, k, v, eps=1e-6, phi=_phi, normalise=True, eps_outside=False, phi_q=True, z_mean=False):
    fq, fk = (phi(q) if phi_q else q), phi(k)
    num = fq @ (fk.transpose(-2, -1) @ v)
    if not normalise:
        return num
    z = fk.mean(dim=-2) if z_mean else fk.sum(dim=-2)
    den = fq @ z.unsqueeze(-1)
    return num / den + eps if eps_outside else num / (den + eps)


def _causal(q, k, v, eps=1e-6, phi=_phi, normalise=True, shift=0, causal_den=True, sum_dim=-3, phi_q=True):
    phi_q, phi_k = (phi(q) if phi_q else q), phi(k)
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


def _quadratic(q, k, v, eps=1e-6, causal=False):
    scores = _phi(q) @ _phi(k).transpose(-2, -1)  # (..., S_q, S_k): the matrix linear attention avoids
    if causal:
        scores = scores.tril()
    return (scores @ v) / (scores.sum(dim=-1, keepdim=True) + eps)


def _quadratic_rows(q, k, v, eps=1e-6, rows=16):
    """φ(q)φ(k)ᵀ a few query rows at a time: no tensor above 16 · S_k, but O(S_q·S_k·D) work."""
    pq, pk = _phi(q), _phi(k)
    outs = []
    for i in range(0, q.size(-2), rows):
        a = pq[..., i:i + rows, :] @ pk.transpose(-2, -1)  # (..., rows, S_k)
        outs.append(a @ v / (a.sum(dim=-1, keepdim=True) + eps))
    return torch.cat(outs, dim=-2)


def _softmax_attention(q, k, v, eps=1e-6):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1) @ v


MISSING_NORMALISER = "the normaliser is missing: divide φ(q)(φ(k)ᵀv) by φ(q)·Σ_j φ(k_j) + eps, so that the weights on the values sum to 1."
NO_EPS = "eps was not added to the normaliser (or the eps argument was ignored): divide by φ(q)·Σ_j φ(k_j) + eps."
PHI_ONLY_ON_KEYS = "φ was applied to k only: linear attention maps both q and k through φ = elu + 1 (φ(q) in the numerator and in the normaliser)."
NORMALISER_MEAN = "the normaliser averaged φ(k_j) over the keys instead of summing them: divide by φ(q)·Σ_j φ(k_j) + eps (a sum, like the numerator's)."

NO_KEEPDIM = ("the normaliser has shape (..., S_q) instead of (..., S_q, 1), so dividing the (..., S_q, D_v) "
              "numerator by it broadcasts along the wrong dim: keep a trailing dim (keepdim=True or unsqueeze(-1)).")


def _linear_no_keepdim(q, k, v, eps=1e-6):
    fq, fk = _phi(q), _phi(k)
    den = (fq * fk.sum(dim=-2, keepdim=True)).sum(dim=-1)  # (..., S_q): the trailing dim is gone
    return (fq @ (fk.transpose(-2, -1) @ v)) / (den + eps)


LINEAR_MUTANTS = [
    Mutant("missing_normaliser", MISSING_NORMALISER, lambda q, k, v, eps=1e-6: _linear(q, k, v, eps, normalise=False)),
    Mutant("relu_feature_map", RELU, lambda q, k, v, eps=1e-6: _linear(q, k, v, eps, phi=F.relu)),
    Mutant("elu_without_plus_one", ELU_NO_PLUS_ONE, lambda q, k, v, eps=1e-6: _linear(q, k, v, eps, phi=F.elu)),
    Mutant("scaled_by_sqrt_d", "q was divided by sqrt(D) as in softmax attention: linear attention applies φ to q and k as they are.",
           lambda q, k, v, eps=1e-6: _linear(q / math.sqrt(q.size(-1)), k, v, eps)),
    Mutant("no_eps", NO_EPS, lambda q, k, v, eps=1e-6: _linear(q, k, v, 0.0)),
    Mutant("eps_outside", "eps was added after the division: it belongs in the normaliser, num / (φ(q)·Σφ(k) + eps).",
           lambda q, k, v, eps=1e-6: _linear(q, k, v, eps, eps_outside=True)),
    Mutant("phi_only_on_keys", PHI_ONLY_ON_KEYS, lambda q, k, v, eps=1e-6: _linear(q, k, v, eps, phi_q=False)),
    Mutant("normaliser_mean", NORMALISER_MEAN, lambda q, k, v, eps=1e-6: _linear(q, k, v, eps, z_mean=True)),
    Mutant("softmax_attention", "this is softmax attention, softmax(q kᵀ/√D) v: linear attention replaces the softmax by the "
           "feature map, φ(q)(φ(k)ᵀv) / (φ(q)·Σ_j φ(k_j) + eps).", _softmax_attention),
    Mutant("normaliser_without_keepdim", NO_KEEPDIM, _linear_no_keepdim),
    Mutant("phi_applied_to_values", "φ was applied to v too: only q and k go through the feature map; the values "
           "are averaged as they are, out_i = φ(q_i)(Σ_j φ(k_j)ᵀ v_j) / (φ(q_i)·Σ_j φ(k_j) + eps).",
           lambda q, k, v, eps=1e-6: _linear(q, k, _phi(v), eps)),
    Mutant("quadratic_scores", QUADRATIC, _quadratic),
    Mutant("quadratic_in_row_blocks_of_16", QUADRATIC_WORK, lambda q, k, v, eps=1e-6: _quadratic_rows(q, k, v, eps)),
]


def _v_linear_einsum(q, k, v, eps=1e-6):
    pq, pk = F.elu(q) + 1, F.elu(k) + 1
    kv = torch.einsum("...sd,...se->...de", pk, v)
    den = torch.einsum("...sd,...d->...s", pq, pk.sum(-2))[..., None]
    return torch.einsum("...sd,...de->...se", pq, kv) / (den + eps)


def _v_linear_float64_ones_column(q, k, v, eps=1e-6):
    """The normaliser as an extra column of ones appended to v, computed in float64."""
    pq, pk = F.elu(q.double()) + 1, F.elu(k.double()) + 1
    v1 = torch.cat([v.double(), torch.ones(*v.shape[:-1], 1, dtype=torch.float64)], dim=-1)
    kv = pk.transpose(-2, -1) @ v1  # (..., D, D_v + 1)
    both = pq @ kv  # (..., S_q, D_v + 1)
    return (both[..., :-1] / (both[..., -1:] + eps)).to(q.dtype)


LINEAR_EXERCISE = Exercise(
    name="linear_attention",
    reference=ref.linear_attention,
    make_cases=lambda seed: _attention_cases(seed, causal=False),
    mutants=LINEAR_MUTANTS,
    variants=[Variant("einsum", _v_linear_einsum),
              Variant("float64_ones_column", _v_linear_float64_ones_column, demo=True)],
    contract=Contract("""Non-causal linear attention with the feature map φ(x) = elu(x) + 1:

        out_i = φ(q_i) (Σ_j φ(k_j) v_jᵀ) / (φ(q_i) · Σ_j φ(k_j) + eps)

    q: (..., S_q, D)   k: (..., S_k, D)   v: (..., S_k, D_v)   eps: float, added to the normaliser
    Returns out (..., S_q, D_v).
    Use associativity, φ(q) (φ(k)ᵀ v): never build the S_q × S_k matrix φ(q) φ(k)ᵀ, not even a
    few rows at a time, and not only for short inputs (the work is counted at two sizes).
    """, grad="q, k and v", budgets=(_cost(causal=False), _work_cost())),
)
check_linear_attention = register(LINEAR_EXERCISE)


# ---------------------------------------------------------------- causal_linear_attention
def _causal_rnn_inplace(q, k, v, eps=1e-6):
    """The RNN loop with an in-place state update: every output holds a view of the same state tensor."""
    pq, pk = F.elu(q) + 1, F.elu(k) + 1
    state = q.new_zeros(*q.shape[:-2], q.size(-1), v.size(-1))
    z = q.new_zeros(*q.shape[:-2], q.size(-1))
    states, zs = [], []
    for i in range(q.size(-2)):
        state += pk[..., i, :, None] * v[..., i, None, :]  # in place: the stored "S_i" all alias one tensor
        z += pk[..., i, :]
        states.append(state)
        zs.append(z)
    st, zz = torch.stack(states, dim=-3), torch.stack(zs, dim=-2)  # every S_i is now S_S
    num = (pq.unsqueeze(-2) @ st).squeeze(-2)
    return num / ((pq * zz).sum(-1, keepdim=True) + eps)


def _causal_rnn_inplace_per_step(q, k, v, eps=1e-6):
    """The RNN loop, right forward values, but the state is updated in place after matmul saved it."""
    pq, pk = F.elu(q) + 1, F.elu(k) + 1
    state = q.new_zeros(*q.shape[:-2], q.size(-1), v.size(-1))
    z = q.new_zeros(*q.shape[:-2], q.size(-1))
    outs = []
    for i in range(q.size(-2)):
        state += pk[..., i, :, None] * v[..., i, None, :]
        z += pk[..., i, :]
        num = (pq[..., i, None, :] @ state).squeeze(-2)
        outs.append(num / ((pq[..., i, :] * z).sum(-1, keepdim=True) + eps))
    return torch.stack(outs, dim=-2)


INPLACE_GRAD = ("the forward values are right, but the gradients fail: the state is updated in place (state += ..., "
                "z += ...) after a matmul of the previous step saved it for the backward pass; write "
                "state = state + φ(k_i)ᵀv_i and z = z + φ(k_i) (new tensors each step).")

INPLACE_STATE = ("every position used the final state S_S, z_S (the sum over all keys): the state was updated in place "
                 "(state += ...) and the list kept references to that one tensor, so every stored S_i changed with it; "
                 "write state = state + φ(k_i)ᵀv_i (a new tensor each step), or read the output off before the next update.")

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
    Mutant("relu_feature_map", RELU, lambda q, k, v, eps=1e-6: _causal(q, k, v, eps, phi=F.relu)),
    Mutant("phi_only_on_keys", PHI_ONLY_ON_KEYS, lambda q, k, v, eps=1e-6: _causal(q, k, v, eps, phi_q=False)),
    Mutant("scaled_by_sqrt_d", "q was divided by sqrt(D) as in softmax attention: linear attention applies φ to q and k as they are.",
           lambda q, k, v, eps=1e-6: _causal(q / math.sqrt(q.size(-1)), k, v, eps)),
    Mutant("quadratic_scores", QUADRATIC, lambda q, k, v, eps=1e-6: _quadratic(q, k, v, eps, causal=True)),
    Mutant("in_place_state_update", INPLACE_STATE, _causal_rnn_inplace),
    Mutant("in_place_state_update_breaks_gradients", INPLACE_GRAD, _causal_rnn_inplace_per_step),
]


def _v_causal_rnn(q, k, v, eps=1e-6):
    """The RNN form: a (D, D_v) state and a (D,) normaliser, updated once per token."""
    pq, pk = F.elu(q) + 1, F.elu(k) + 1
    state = q.new_zeros(*q.shape[:-2], q.size(-1), v.size(-1))
    z = q.new_zeros(*q.shape[:-2], q.size(-1))
    outs = []
    for i in range(q.size(-2)):
        state = state + pk[..., i, :, None] * v[..., i, None, :]
        z = z + pk[..., i, :]
        num = (pq[..., i, None, :] @ state).squeeze(-2)
        outs.append(num / ((pq[..., i, :] * z).sum(-1, keepdim=True) + eps))
    return torch.stack(outs, dim=-2)


def _v_causal_einsum_float64(q, k, v, eps=1e-6):
    pq, pk = F.elu(q.double()) + 1, F.elu(k.double()) + 1
    kv = torch.einsum("...sd,...se->...sde", pk, v.double()).cumsum(-3)
    num = torch.einsum("...sd,...sde->...se", pq, kv)
    den = torch.einsum("...sd,...sd->...s", pq, pk.cumsum(-2)).unsqueeze(-1)
    return (num / (den + eps)).to(q.dtype)


def _v_causal_chunked(q, k, v, eps=1e-6, chunk=16):
    """Chunks of 16 positions: a small masked matrix inside a chunk, a running state across chunks."""
    pq, pk = F.elu(q) + 1, F.elu(k) + 1
    state = q.new_zeros(*q.shape[:-2], q.size(-1), v.size(-1))
    z = q.new_zeros(*q.shape[:-2], q.size(-1))
    outs = []
    for s in range(0, q.size(-2), chunk):
        cq, ck, cv = pq[..., s:s + chunk, :], pk[..., s:s + chunk, :], v[..., s:s + chunk, :]
        a = (cq @ ck.transpose(-2, -1)).tril()  # (..., c, c)
        num = cq @ state + a @ cv
        den = cq @ z.unsqueeze(-1) + a.sum(-1, keepdim=True)
        outs.append(num / (den + eps))
        state = state + ck.transpose(-2, -1) @ cv
        z = z + ck.sum(-2)
    return torch.cat(outs, dim=-2)


CAUSAL_EXERCISE = Exercise(
    name="causal_linear_attention",
    reference=ref.causal_linear_attention,
    make_cases=lambda seed: _attention_cases(seed, causal=True),
    mutants=CAUSAL_MUTANTS,
    variants=[Variant("rnn_loop", _v_causal_rnn, demo=True), Variant("einsum_float64", _v_causal_einsum_float64),
              Variant("chunked", _v_causal_chunked)],
    contract=Contract("""Causal linear attention with φ(x) = elu(x) + 1: position i uses only the keys j ≤ i.

        out_i = φ(q_i) S_i / (φ(q_i) · z_i + eps),  S_i = Σ_{j≤i} φ(k_j) v_jᵀ,  z_i = Σ_{j≤i} φ(k_j)

    q: (..., S, D)   k: (..., S, D)   v: (..., S, D_v)   eps: float, added to the normaliser
    Returns out (..., S, D_v).
    Use prefix sums (or one RNN step per token): never build the S × S matrix φ(q) φ(k)ᵀ.
    """, grad="q, k and v", budgets=(_cost(causal=True),), shapes={"q": ["...", "S", "D"], "k": ["...", "S", "D"], "v": ["...", "S", "D_v"]}),
)
check_causal_linear_attention = register(CAUSAL_EXERCISE)
