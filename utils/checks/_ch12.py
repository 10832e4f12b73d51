"""Checks for chapter 12 — rotary position embedding."""
import torch

from .. import reference as ref
from ._contract import Contract, raises_somewhere
from ._core import Case, Exercise, Mutant, Variant, generator, randn, rng
from ._guards import DTYPE, SHARED
from ._registry import register

__all__ = ["check_rope_angles", "check_apply_rope"]

F64 = torch.float64


def _angles(positions, dim, base, two=2.0, sign=-1.0):
    """The angle table, with the mistakes as knobs: exponent sign·two·i/dim."""
    i = torch.arange(dim // 2, dtype=torch.float64)
    return positions.to(torch.float64).unsqueeze(-1) * base ** (sign * two * i / dim)


# ---------------------------------------------------------------- rope_angles
def _angle_cases(seed: int) -> list:
    r = rng(seed)
    cases = []

    def add(label, seq_len, dim, base=None):
        kwargs = {} if base is None else {"base": base}
        cases.append(Case(f"{label}: seq_len={seq_len}, dim={dim}" + ("" if base is None else f", base={base}"),
                          (seq_len, dim), kwargs))

    add("default base", 8, 8)
    add("a head dim like GPT-2's", 12, 64)
    add("base = 100", 6, 8, 100.0)
    add("base = 500000 (Llama 3)", 10, 16, 500000.0)
    add("dim = 6 (odd number of pairs)", 7, 6)
    add("one pair (dim = 2)", 5, 2)
    add("a single position (seq_len = 1)", 1, 16)
    for i in range(4):  # random sizes
        add(f"random case {i + 1}", r.randint(1, 40), 2 * r.randint(1, 32),
            r.choice([None, 1000.0, 10000.0, 50000.0]))
    return cases


def _angles_no_two(seq_len, dim, base=10000.0):
    return _angles(torch.arange(seq_len), dim, base, two=1.0).float()


def _angles_from_one(seq_len, dim, base=10000.0):
    return _angles(torch.arange(1, seq_len + 1), dim, base).float()


def _angles_sign(seq_len, dim, base=10000.0):
    return _angles(torch.arange(seq_len), dim, base, sign=1.0).float()


def _angles_ignores_base(seq_len, dim, base=10000.0):
    return _angles(torch.arange(seq_len), dim, 10000.0).float()


def _angles_duplicated(seq_len, dim, base=10000.0):
    a = _angles(torch.arange(seq_len), dim, base).float()
    return torch.cat((a, a), dim=-1)


def _angles_every_dim(seq_len, dim, base=10000.0):
    j = torch.arange(dim, dtype=torch.float64)  # every feature, not every pair
    return (torch.arange(seq_len, dtype=torch.float64)[:, None] * base ** (-j / dim)).float()


def _angles_transposed(seq_len, dim, base=10000.0):
    return _angles(torch.arange(seq_len), dim, base).float().T.contiguous()


def _angles_one_over_i(seq_len, dim, base=10000.0):
    i = torch.arange(dim // 2, dtype=torch.float64)
    return (torch.arange(seq_len, dtype=torch.float64)[:, None] / base ** (-2 * i / dim)).float()


NO_TWO = "the frequencies use base^(−i/dim): with i the pair index the exponent is −2i/dim, θ_i = base^(−2i/dim)."
FROM_ONE = "the positions start at 1: the first position is m = 0 (no rotation)."
IGNORES_BASE = "the `base` argument was ignored (10000 hard-coded): θ_i = base^(−2i/dim)."
SIGN = "the exponent has the wrong sign: θ_i = base^(−2i/dim) falls from 1 towards 1/base as i grows."

ANGLE_MUTANTS = [
    Mutant("theta_without_two", NO_TWO, _angles_no_two),
    Mutant("positions_from_one", FROM_ONE, _angles_from_one),
    Mutant("exponent_sign", SIGN, _angles_sign),
    Mutant("divided_by_theta", SIGN, _angles_one_over_i),
    Mutant("ignores_base", IGNORES_BASE, _angles_ignores_base),
    Mutant("duplicated_angles", "the angles were concatenated twice to (seq_len, dim), as in Hugging Face's rotate_half code: return one angle per pair, (seq_len, dim // 2).", _angles_duplicated),
    Mutant("one_angle_per_feature", "one angle per feature, base^(−j/dim) for j < dim, was returned: RoPE has one angle per pair, "
           "θ_i = base^(−2i/dim) for i < dim // 2, so the table is (seq_len, dim // 2).", _angles_every_dim),
    Mutant("transposed_table", "the table is transposed: rows are positions and columns are pairs, (seq_len, dim // 2) "
           "(torch.outer(positions, inv_freq), not torch.outer(inv_freq, positions)).", _angles_transposed),
]


def _v_angles_float32(seq_len, dim, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    return torch.outer(torch.arange(seq_len).float(), inv_freq)


def _v_angles_loops(seq_len, dim, base=10000.0):
    rows = [[m * base ** (-2 * i / dim) for i in range(dim // 2)] for m in range(seq_len)]
    return torch.tensor(rows, dtype=torch.float64).reshape(seq_len, dim // 2)  # float64 is fine


def _v_angles_exp_log(seq_len, dim, base=10000.0):
    import math
    inv_freq = torch.exp(-torch.arange(dim // 2, dtype=torch.float32) * (2.0 * math.log(base) / dim))
    return torch.arange(seq_len, dtype=torch.float32)[:, None] * inv_freq[None, :]


ANGLE_EXERCISE = Exercise(
    name="rope_angles",
    reference=ref.rope_angles,
    make_cases=_angle_cases,
    mutants=ANGLE_MUTANTS,
    variants=[Variant("float32_outer", _v_angles_float32), Variant("python_loops_float64", _v_angles_loops, demo=True),
              Variant("exp_log", _v_angles_exp_log)],
    # float32 angles carry a few float32 roundings (≤ ~3e-6 relative: exp(log) forms of base^(−2i/dim)
    # at base 500000 the most): 2e-5 relative covers every float32 way of computing them, and still
    # tells a base off by 1 in 10⁴ (base^(−2i/dim) then moves by (2i/dim)·10⁻⁴ relative)
    atol=1e-6,
    rtol=2e-5,
    contract=Contract("""RoPE rotation angles: angle[m, i] = m · θ_i with θ_i = base^(−2i/dim).

    seq_len: int, positions m = 0 … seq_len − 1;  dim: int, even, the head dim;
    base: float.  Returns a floating-point tensor (seq_len, dim // 2): one angle per
    position (row) and per pair of features i = 0 … dim // 2 − 1 (column).
    """, same_dtype=False),
)
check_rope_angles = register(ANGLE_EXERCISE)


# ---------------------------------------------------------------- apply_rope
def _rope_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, shape, positions=None, base=None, grad=False, dtype=torch.float32, scale=1.0):
        x = randn(*shape, gen=g, dtype=dtype, scale=scale)
        kwargs = {}
        extra = ""
        if positions is not None:
            kwargs["positions"] = positions
            extra += f", positions {positions.tolist() if positions.numel() <= 8 else tuple(positions.shape)}"
        if base is not None:
            kwargs["base"] = base
            extra += f", base={base}"
        cases.append(Case(f"{label}: x {tuple(x.shape)}{extra}", (x,), kwargs, grad=grad))

    add("(B, S, D), default positions", (2, 6, 8))
    add("(B, H, S, D)", (2, 3, 5, 4))
    add("(S, D), no batch dims", (6, 8))
    add("positions offset by a cache (20 … 24)", (2, 5, 8), positions=torch.arange(20, 25))
    add("arbitrary positions", (3, 6, 4), positions=torch.tensor([0, 3, 4, 9, 10, 31]))
    add("a decode step at position 37", (2, 2, 1, 8), positions=torch.tensor([37]))
    add("explicit arange positions", (4, 6), positions=torch.arange(4))
    add("base = 100", (2, 7, 8), base=100.0)
    add("base = 500000 with positions", (2, 4, 16), positions=torch.tensor([5, 1, 60, 2]), base=500000.0)
    add("gradients (float64) of a random loss of the output", (2, 2, 5, 6), grad=True, dtype=F64)
    add("gradients (float64) with positions", (2, 4, 8), positions=torch.tensor([3, 7, 8, 50]), grad=True, dtype=F64)
    add("head dim 64", (1, 2, 9, 64))
    add("one pair (D = 2)", (2, 4, 2))
    add("a single position (S = 1)", (2, 1, 6))
    add("large-magnitude inputs (|x| ~ 100)", (2, 5, 8), scale=100.0)
    add("float64 input (the output keeps x's dtype)", (2, 3, 6), positions=torch.tensor([0, 9, 40]), dtype=F64)
    add("negative positions (a rotation back)", (2, 6, 8), positions=torch.tensor([-3, 0, 5, -40, -1, 12]))
    add("every position 0 (no rotation; the output equals x, as a new tensor)", (2, 4, 6),
        positions=torch.zeros(4, dtype=torch.long))
    for i in range(4):  # random shapes; positions ≤ 100 keep float32 angle round-off small
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s, d = r.randint(1, 12), 2 * r.randint(1, 8)
        pos = None
        if i % 2:
            start = r.randint(0, 80)
            pos = torch.arange(start, start + s)
        add(f"random case {i + 1}", (*lead, s, d), positions=pos, base=r.choice([None, 1000.0]))
    return cases


def _rope(x, positions=None, base=10000.0, pairing="interleaved", two=2.0, sign=1.0, swap=False, shift=0,
          seq_dim=-2):
    """apply_rope with the mistakes as knobs."""
    S, D = x.shape[seq_dim], x.shape[-1]
    if positions is None:
        positions = torch.arange(S)
    angles = sign * _angles(positions + shift, D, base, two=two)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if swap:
        cos, sin = sin, cos
    if pairing == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
    else:  # half-split: pairs (x[i], x[i + D/2])
        a, b = x[..., : D // 2], x[..., D // 2:]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    if pairing == "interleaved":
        return torch.stack((ra, rb), dim=-1).flatten(-2)
    return torch.cat((ra, rb), dim=-1)


def _rope_mixed_conventions(x, positions=None, base=10000.0):
    """Interleaved pairs but Hugging Face's duplicated table cat(θ, θ): feature j gets angle j mod D/2."""
    S, D = x.shape[-2], x.shape[-1]
    positions = torch.arange(S) if positions is None else positions
    angles = _angles(positions, D, base)
    full = torch.cat((angles, angles), dim=-1)  # (S, D)
    cos, sin = full.cos().to(x.dtype), full.sin().to(x.dtype)
    rot = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)  # (−b, a) per pair
    return x * cos + rot * sin


def _rope_rotate_half_sign(x, positions=None, base=10000.0):
    """rotate_half written as (b, −a): the rotation by −angle (a cos + b sin, −a sin + b cos)."""
    return _rope(x, positions, base, sign=-1.0)




def _rope_table_lookup(x, positions=None, base=10000.0):
    """A table of angles for positions 0 … max, indexed by the positions: a negative one wraps around."""
    S, D = x.shape[-2], x.shape[-1]
    positions = torch.arange(S) if positions is None else positions
    table = _angles(torch.arange(int(positions.abs().max()) + 1), D, base)  # (max + 1, D/2)
    angles = table[positions]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def _rope_returns_x_unrotated(x, positions=None, base=10000.0):
    """A shortcut: nothing to rotate, so x itself is returned."""
    if positions is not None and not bool(positions.any()):
        return x
    return _rope(x, positions, base)


def _rope_half_dim(x, positions=None, base=10000.0):
    S, D = x.shape[-2], x.shape[-1]
    positions = torch.arange(S) if positions is None else positions
    theta = base ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / (D // 2))
    angles = positions.to(torch.float64).unsqueeze(-1) * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def _rope_float32_out(x, positions=None, base=10000.0):
    return _rope(x.float(), positions, base)


def _rope_float64_out(x, positions=None, base=10000.0):
    return _rope(x.double(), positions, base)


HALF_SPLIT = ("the pairs were split in halves (x[i], x[i + D/2]) as in GPT-NeoX / Hugging Face rotate_half; "
              "this exercise rotates interleaved pairs (x[2i], x[2i+1]).")
WRONG_DIRECTION = "the rotation goes the wrong way: rotate (a, b) by +angle to (a cos − b sin, a sin + b cos)."

ROPE_MUTANTS = [
    Mutant("half_split_pairs", HALF_SPLIT, lambda x, positions=None, base=10000.0: _rope(x, positions, base, pairing="half")),
    Mutant("wrong_direction", WRONG_DIRECTION, _rope_rotate_half_sign),
    Mutant("theta_without_two", NO_TWO, lambda x, positions=None, base=10000.0: _rope(x, positions, base, two=1.0)),
    Mutant("positions_ignored", "the `positions` argument was ignored: rotate row s by angle[positions[s]], not angle[s].",
           lambda x, positions=None, base=10000.0: _rope(x, None, base)),
    Mutant("positions_off_by_one", "the positions are off by one: row s is rotated by angle[positions[s]] (default positions = arange(S), starting at 0).",
           lambda x, positions=None, base=10000.0: _rope(x, positions, base, shift=1)),
    Mutant("cos_sin_swapped", "cos and sin were swapped: (a, b) -> (a cos − b sin, a sin + b cos).",
           lambda x, positions=None, base=10000.0: _rope(x, positions, base, swap=True)),
    Mutant("ignores_base", IGNORES_BASE, lambda x, positions=None, base=10000.0: _rope(x, positions, 10000.0)),
    Mutant("mixed_conventions", "interleaved pairs were combined with the half-split angle table cat(θ, θ) (Hugging Face's): "
           "both features of pair i, x[2i] and x[2i+1], are rotated by the same angle[pos, i].", _rope_mixed_conventions),
    Mutant("theta_with_half_dim", "the frequencies were computed with dim = D/2 (the number of pairs) instead of "
           "D: θ_i = base^(−2i/D) with D = x.size(-1), the head dim.", _rope_half_dim),
    Mutant("table_indexed_by_position", "the angles were looked up in a table indexed by the positions "
           "(table[positions]): a negative position indexes from the end of the table. Compute angle = m · θ_i "
           "from the positions themselves; a negative m rotates backwards.", _rope_table_lookup),
    Mutant("returns_x_itself", f"apply_rope {SHARED.format(name='x')}", _rope_returns_x_unrotated),
    Mutant("float32_output", DTYPE.format(got="float32", want="float64"), _rope_float32_out),
    Mutant("float64_output", DTYPE.format(got="float64", want="float32"), _rope_float64_out),
    Mutant("seq_len_from_dim_1", "the sequence length was read from x.size(1): with x (..., S, D) it is x.size(-2) "
           "(for (S, D) or (B, H, S, D) inputs size(1) is D or H).",
           lambda x, positions=None, base=10000.0: _rope(x, positions, base, seq_dim=1 if x.dim() > 1 else -2)),
]


def _v_rope_float32_slices(x, positions=None, base=10000.0):
    """The usual float32 code: inv_freq, outer product, cos/sin, strided slices written into a new tensor."""
    S, D = x.shape[-2], x.shape[-1]
    assert D % 2 == 0, "D must be even"  # an assert instead of ValueError is fine
    positions = torch.arange(S) if positions is None else positions
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2).float() / D))
    freqs = positions.float()[:, None] * inv_freq
    cos, sin = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


def _v_rope_complex(x, positions=None, base=10000.0):
    """Pairs as complex numbers times e^{i·angle} (the paper's and Meta's Llama's form)."""
    S, D = x.shape[-2], x.shape[-1]
    positions = torch.arange(S) if positions is None else positions
    freqs = torch.outer(positions.double(), base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D))
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(freqs), freqs)).flatten(-2).to(x.dtype)


def _v_rope_rotation_matrices(x, positions=None, base=10000.0):
    """A block-diagonal 2×2 rotation per pair, applied with einsum."""
    S, D = x.shape[-2], x.shape[-1]
    positions = torch.arange(S) if positions is None else positions
    t = positions.double()[:, None] * base ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)
    c, s = t.cos(), t.sin()
    rot = torch.stack((torch.stack((c, -s), -1), torch.stack((s, c), -1)), -2).to(x.dtype)  # (S, D/2, 2, 2)
    pairs = x.reshape(*x.shape[:-1], D // 2, 2)
    return torch.einsum("spij,...spj->...spi", rot, pairs).reshape(x.shape)


def _odd_d_tip(fn) -> str | None:
    """Not graded: an odd head dim has no pairs to rotate; a clear error helps the learner later. The
    tip reads the code (a raise or an assert): it never calls it on an odd D, outside the contract."""
    if raises_somewhere(fn) is not False:
        return None
    return ("apply_rope has no raise or assert: RoPE rotates pairs of features, so a clear error (ValueError "
            "or assert) for an odd D would catch a wrong shape early.")


ROPE_EXERCISE = Exercise(
    name="apply_rope",
    reference=ref.apply_rope,
    make_cases=_rope_cases,
    mutants=ROPE_MUTANTS,
    variants=[Variant("float32_slices_assert", _v_rope_float32_slices),
              Variant("complex_float64", _v_rope_complex, demo=True),
              Variant("rotation_matrices_einsum", _v_rope_rotation_matrices)],
    tips=(_odd_d_tip,),
    # the reference rotates by angles computed in float64; a float32 angle m·θ carries up to
    # ~6e-8·m rad of round-off, so float32 solutions (inv_freq + outer product, complex polar)
    # differ by up to ~3e-6 at the positions used here (≤ 100), more for other orders of the
    # arithmetic: allow 1e-4 absolute (and 1e-4 relative for |x| ~ 100), still far below every
    # mistake in the bank (errors of O(|x|))
    atol=1e-4,
    contract=Contract("""Rotate each interleaved pair (x[..., 2i], x[..., 2i+1]) by angle[positions[s], i].

    x: (..., S, D), D even   positions: long (S,), default arange(S)   base: float
    positions are any integers, negative ones too (a rotation back); the check uses |m| ≤ 100,
    where angles computed in float32 are accurate enough.
    angle[m, i] = m · base^(−2i/dim) with dim = D (as in rope_angles).
    For a pair (a, b) and angle t: (a cos t − b sin t, a sin t + b cos t), a rotation by +t.
    Returns a new tensor (..., S, D), same dtype as x.
    """, grad="x", kinds={"x": "tensor"}, fresh=True),
)
check_apply_rope = register(ROPE_EXERCISE)
