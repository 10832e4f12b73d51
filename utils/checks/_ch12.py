"""Checks for chapter 12 — rotary position embedding."""
import torch

from .. import reference as ref
from ._core import Case, CheckFailure, Exercise, Mutant, generator, randn, rng
from ._registry import register

__all__ = ["check_rope_angles", "check_apply_rope"]


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
    add("one pair (dim = 2)", 5, 2)
    add("a single position (seq_len = 1)", 1, 16)
    add("a head dim like GPT-2's", 12, 64)
    add("base = 100", 6, 8, 100.0)
    add("base = 500000 (Llama 3)", 10, 16, 500000.0)
    add("dim = 6 (odd number of pairs)", 7, 6)
    for i in range(5):  # random sizes
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


NO_TWO = "the frequencies use base^(−i/dim): with i the pair index the exponent is −2i/dim, θ_i = base^(−2i/dim)."
FROM_ONE = "the positions start at 1: the first position is m = 0 (no rotation)."
IGNORES_BASE = "the `base` argument was ignored (10000 hard-coded): θ_i = base^(−2i/dim)."

ANGLE_MUTANTS = [
    Mutant("theta_without_two", NO_TWO, _angles_no_two),
    Mutant("positions_from_one", FROM_ONE, _angles_from_one),
    Mutant("exponent_sign", "the exponent has the wrong sign: θ_i = base^(−2i/dim) falls from 1 towards 1/base as i grows.", _angles_sign),
    Mutant("ignores_base", IGNORES_BASE, _angles_ignores_base),
    Mutant("duplicated_angles", "the angles were concatenated twice to (seq_len, dim), as in Hugging Face's rotate_half code: return one angle per pair, (seq_len, dim // 2).", _angles_duplicated),
]

ANGLE_EXERCISE = Exercise(
    name="rope_angles",
    reference=ref.rope_angles,
    make_cases=_angle_cases,
    mutants=ANGLE_MUTANTS,
)
check_rope_angles = register(ANGLE_EXERCISE)


# ---------------------------------------------------------------- apply_rope
def _rope_cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, shape, positions=None, base=None):
        x = randn(*shape, gen=g)
        kwargs = {}
        extra = ""
        if positions is not None:
            kwargs["positions"] = positions
            extra += f", positions {positions.tolist() if positions.numel() <= 8 else tuple(positions.shape)}"
        if base is not None:
            kwargs["base"] = base
            extra += f", base={base}"
        cases.append(Case(f"{label}: x {tuple(x.shape)}{extra}", (x,), kwargs))

    add("(S, D), default positions", (6, 8))
    add("(B, H, S, D)", (2, 3, 5, 4))
    add("one pair (D = 2)", (2, 4, 2))
    add("a single position (S = 1)", (2, 1, 6))
    add("a decode step at position 37", (2, 2, 1, 8), positions=torch.tensor([37]))
    add("positions offset by a cache (20 … 24)", (2, 5, 8), positions=torch.arange(20, 25))
    add("arbitrary positions", (3, 6, 4), positions=torch.tensor([0, 3, 4, 9, 10, 31]))
    add("explicit arange positions", (4, 6), positions=torch.arange(4))
    add("base = 100", (2, 7, 8), base=100.0)
    add("base = 500000 with positions", (2, 4, 16), positions=torch.tensor([5, 1, 60, 2]), base=500000.0)
    add("head dim 64", (1, 2, 9, 64))
    for i in range(6):  # random shapes; positions ≤ 100 keep float32 angle round-off small
        lead = tuple(r.randint(1, 3) for _ in range(r.randint(0, 2)))
        s, d = r.randint(1, 12), 2 * r.randint(1, 8)
        pos = None
        if i % 2:
            start = r.randint(0, 80)
            pos = torch.arange(start, start + s)
        add(f"random case {i + 1}", (*lead, s, d), positions=pos, base=r.choice([None, 1000.0]))
    return cases


def _rope(x, positions=None, base=10000.0, pairing="interleaved", two=2.0, sign=1.0, swap=False, shift=0):
    """apply_rope with the mistakes as knobs."""
    S, D = x.shape[-2], x.shape[-1]
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


def _rope_odd_passthrough(x, positions=None, base=10000.0):
    D = x.shape[-1]
    if D % 2 == 0:
        return _rope(x, positions, base)
    return torch.cat((_rope(x[..., :-1], positions, base), x[..., -1:]), dim=-1)


ODD_D = "an odd last dim was not rejected: RoPE rotates pairs of features, so raise ValueError when D is odd."


def _check_odd_d(fn) -> None:
    x = randn(2, 3, 5, gen=generator(5))
    try:
        fn(x)
    except ValueError:
        return
    except Exception as err:
        raise CheckFailure(
            f"apply_rope on x (2, 3, 5) (odd D) raised {type(err).__name__} ({err}); it should raise "
            "ValueError: check D % 2 first and raise ValueError with a clear message."
        ) from None
    raise CheckFailure(f"apply_rope on x (2, 3, 5) returned a result. Likely mistake: {ODD_D}")


ROPE_MUTANTS = [
    Mutant("half_split_pairs", "the pairs were split in halves (x[i], x[i + D/2]) as in GPT-NeoX / Hugging Face rotate_half; "
           "this exercise rotates interleaved pairs (x[2i], x[2i+1]).", lambda x, positions=None, base=10000.0: _rope(x, positions, base, pairing="half")),
    Mutant("wrong_direction", "the rotation goes the wrong way: rotate (a, b) by +angle to (a cos − b sin, a sin + b cos).",
           lambda x, positions=None, base=10000.0: _rope(x, positions, base, sign=-1.0)),
    Mutant("theta_without_two", NO_TWO, lambda x, positions=None, base=10000.0: _rope(x, positions, base, two=1.0)),
    Mutant("positions_ignored", "the `positions` argument was ignored: rotate row s by angle[positions[s]], not angle[s].",
           lambda x, positions=None, base=10000.0: _rope(x, None, base)),
    Mutant("positions_off_by_one", "the positions are off by one: row s is rotated by angle[positions[s]] (default positions = arange(S), starting at 0).",
           lambda x, positions=None, base=10000.0: _rope(x, positions, base, shift=1)),
    Mutant("cos_sin_swapped", "cos and sin were swapped: (a, b) -> (a cos − b sin, a sin + b cos).",
           lambda x, positions=None, base=10000.0: _rope(x, positions, base, swap=True)),
    Mutant("ignores_base", IGNORES_BASE, lambda x, positions=None, base=10000.0: _rope(x, positions, 10000.0)),
    Mutant("odd_d_not_rejected", ODD_D, _rope_odd_passthrough),
]

ROPE_EXERCISE = Exercise(
    name="apply_rope",
    reference=ref.apply_rope,
    make_cases=_rope_cases,
    mutants=ROPE_MUTANTS,
    # the reference rotates by angles computed in float64; a float32 angle m·θ carries up to
    # ~6e-8·m rad of round-off, so float32 solutions (inv_freq + outer product, complex polar)
    # differ by up to ~3e-6 at the positions used here (≤ 100), more for other orders of the
    # arithmetic: allow 1e-4 absolute, still far below every mistake in the bank (errors of O(|x|))
    atol=1e-4,
    extra_checks=(_check_odd_d,),
)
check_apply_rope = register(ROPE_EXERCISE)
