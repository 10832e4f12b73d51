"""Chapter 12 samples: the correct answers, and three submissions that each carry one realistic
mistake in every exercise (`rope_angles`, `apply_rope`; names from the mutant banks in
utils/checks/_ch12.py) and one wrong quiz answer, so that every exercise meets three distinct
mistakes while the chapter adds only four submissions to the bank.

Each wrong `apply_rope` computes its angles inline (not through the submission's `rope_angles`,
which is wrong too), so each mistake costs exactly the exercise it is in. The derivation is graded
by hand: 0 points automatically.

Built from the current release (``notebooks/``) with the solution's answers filled in, then wrong
answer code substituted, so the samples never drift from the source.
"""
from __future__ import annotations

from ._chapter import Chapter, src

ASSIGNMENT = "12_rotary_position_embedding"
FULL = {"derivation_relative_position": 0, "rope_angles": 2, "apply_rope": 5, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
_src = src
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


# ---------------------------------------------------------------- rope_angles mistakes
ANGLES_NO_TWO = _src('''
import torch


def rope_angles(seq_len, dim, base=10000.0):
    i = torch.arange(dim // 2).float()
    theta = base ** (-i / dim)  # the 2 of 2i/dim forgotten (mutant theta_without_two)
    return torch.outer(torch.arange(seq_len).float(), theta)
''')

ANGLES_FROM_ONE = _src('''
import torch


def rope_angles(seq_len, dim, base=10000.0):
    theta = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    positions = torch.arange(1, seq_len + 1).float()  # positions 1 … seq_len (mutant positions_from_one)
    return positions[:, None] * theta[None, :]
''')

ANGLES_DUPLICATED = _src('''
import torch


def rope_angles(seq_len, dim, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    freqs = torch.outer(torch.arange(seq_len).float(), inv_freq)
    return torch.cat((freqs, freqs), dim=-1)  # (seq_len, dim), as Hugging Face's emb (mutant duplicated_angles)
''')

# ---------------------------------------------------------------- apply_rope mistakes
ROPE_HALF_SPLIT = _src('''
import torch


def apply_rope(x, positions=None, base=10000.0):
    S, D = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(S)
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2).float() / D))
    angles = positions.float()[:, None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]  # pairs (x[i], x[i + D/2]), GPT-NeoX style (mutant half_split_pairs)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
''')

ROPE_POSITIONS_IGNORED = _src('''
import torch


def apply_rope(x, positions=None, base=10000.0):
    S, D = x.shape[-2], x.shape[-1]
    positions = torch.arange(S)  # always 0 … S-1: the argument is overwritten (mutant positions_ignored)
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2).float() / D))
    angles = positions.float()[:, None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out
''')

ROPE_WRONG_DIRECTION = _src('''
import torch


def apply_rope(x, positions=None, base=10000.0):
    S, D = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(S)
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2).float() / D))
    angles = positions.float()[:, None] * inv_freq
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    # rotate_half written as (b, -a): a rotation by -angle (mutant wrong_direction)
    return torch.stack((a * cos + b * sin, -a * sin + b * cos), dim=-1).flatten(-2)
''')

SAMPLES = {
    "ch12_correct": ("chapter 12: the solution's answers", correct, FULL),
    "ch12_mistakes_pairs": (
        "chapter 12: angles with base^(−i/dim), half-split pairs in apply_rope, quiz 2 'a'",
        lambda: _with_answers(rope_angles=ANGLES_NO_TWO, apply_rope=ROPE_HALF_SPLIT, quiz_2='answer_2 = "a"'),
        _expect(rope_angles=0, apply_rope=0, quiz_2=0)),
    "ch12_mistakes_positions": (
        "chapter 12: positions from 1 in rope_angles, the positions argument ignored in apply_rope, quiz 1 'b'",
        lambda: _with_answers(rope_angles=ANGLES_FROM_ONE, apply_rope=ROPE_POSITIONS_IGNORED, quiz_1='answer_1 = "b"'),
        _expect(rope_angles=0, apply_rope=0, quiz_1=0)),
    "ch12_mistakes_direction": (
        "chapter 12: the angle table duplicated to (S, dim), apply_rope rotating by −angle, quiz 3 +0.84 (sign)",
        lambda: _with_answers(rope_angles=ANGLES_DUPLICATED, apply_rope=ROPE_WRONG_DIRECTION, quiz_3="answer_3 = 0.84"),
        _expect(rope_angles=0, apply_rope=0, quiz_3=0)),
}
