"""Chapters 04-05: the course's rules, held by the checks and the notebooks (issues 16 and 17).

- mistakes an outside examiner wrote outside the mutant banks are rejected and *named* (the
  three issue 16 lists for these chapters, and the ones the examiner of 04-05 added);
- every exercise has a ``demo=True`` variant (CI runs the notebook with it);
- PyTorch's ``is_causal=True`` is top-left aligned when S_q != S_k (chapter 04 teaches it, and
  asserts it; this test notices if PyTorch ever changes);
- the self-check questions use the salted quiz API: the key is the hidden test's letter, the hint
  never contains the answer's text, right letters are spread, answer cells start with ``= None``;
- every demo cell that calls a learner's function waits for it (``%%needs``) and every section
  that calls one starts with ``uses(...)``.
"""
import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from utils.checks import EXERCISES, CheckFailure, quiz_key
from utils.checks._core import run_check

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = {
    "04_masking_and_causal_attention": ("causal_mask", "padding_mask", "masked_softmax"),
    "05_self_and_multi_head_attention": ("SelfAttention", "MultiHeadAttention"),
}


def _verdict(name, impl) -> str:
    with pytest.raises(CheckFailure) as err:
        run_check(EXERCISES[name], impl, quiet=True)
    return str(err.value)


# ---------------------------------------------------------------- chapter 04 mistakes
def _padding_one_short(lengths, max_len):  # issue 16 §5: the reverse off-by-one
    return (torch.arange(max_len) < lengths[:, None] - 1)[:, None]


def _padding_gt_from_one(lengths, max_len):  # the same mistake written another way
    return (lengths[:, None] > torch.arange(1, max_len + 1))[:, None]


def _causal_transposed(s_q, s_k=None):
    s_k = s_q if s_k is None else s_k
    return torch.ones(s_k, s_q, dtype=torch.bool).triu(s_q - s_k)


def _causal_plus_one(s_q, s_k=None):
    s_k = s_q if s_k is None else s_k
    return torch.ones(s_q, s_k, dtype=torch.bool).tril(s_k - s_q + 1)


def _causal_abs(s_q, s_k=None):
    s_k = s_q if s_k is None else s_k
    return torch.ones(s_q, s_k, dtype=torch.bool).tril(abs(s_k - s_q))


def _msm_dim_1(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=1).nan_to_num(0.0)


def _msm_exp_no_max(scores, mask):
    e = torch.exp(scores) * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-30)


@pytest.mark.parametrize("name, impl, words", [
    ("padding_mask", _padding_one_short, "one token short"),
    ("padding_mask", _padding_gt_from_one, "one token short"),
    ("causal_mask", _causal_transposed, "transposed"),
    ("causal_mask", _causal_plus_one, "one too wide"),
    ("causal_mask", _causal_abs, "|s_k - s_q|"),
    ("masked_softmax", _msm_dim_1, "dim 1"),
    ("masked_softmax", _msm_exp_no_max, "without subtracting the row's max"),
], ids=["padding_reverse_off_by_one", "padding_gt_from_one", "causal_transposed", "causal_plus_one",
        "causal_abs_offset", "masked_softmax_dim_1", "masked_softmax_exp_without_max"])
def test_ch04_novel_mistakes_are_named(name, impl, words):
    message = _verdict(name, impl)
    assert "Likely mistake" in message and words in message, message


# ---------------------------------------------------------------- chapter 05 mistakes
class _SA(nn.Module):
    fill = float("-inf")

    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_k or d_model
        d_v = d_v or d_k
        self.W_q, self.W_k = nn.Linear(d_model, d_k, bias=False), nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_v, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, self.fill)
        w = s.softmax(-1)
        return w @ v, w


class SelfAttention(_SA):  # issue 16 §5: -1e9 filling, no clean-up of fully masked rows
    fill = -1e9


class _MHA(nn.Module):
    project_v, reverse, dim = True, False, -1

    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        self.h = num_heads
        self.W_q, self.W_k = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)
        self.W_v, self.W_o = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)
        self.drop = nn.Dropout(dropout)

    def split_heads(self, x):
        B, S, D = x.shape
        return x.reshape(B, S, self.h, D // self.h).permute(0, 2, 1, 3)

    def merge_heads(self, x):
        B, H, S, D_h = x.shape
        if self.reverse:
            x = x.flip(1)
        return x.permute(0, 2, 1, 3).reshape(B, S, H * D_h)

    def forward(self, query, key, value, mask=None):
        q, k = self.split_heads(self.W_q(query)), self.split_heads(self.W_k(key))
        v = self.split_heads(self.W_v(value) if self.project_v else value)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = s.softmax(self.dim)
        if mask is not None:
            w = w.masked_fill(~mask, 0.0)
        w = self.drop(w)
        return self.W_o(self.merge_heads(w @ v)), w


def _mha(name, **attrs):
    return type("MultiHeadAttention", (_MHA,), attrs)


@pytest.mark.parametrize("name, impl, words", [
    ("SelfAttention", SelfAttention, "-1e9"),
    ("MultiHeadAttention", _mha("values_not_projected", project_v=False), "unprojected value"),
    ("MultiHeadAttention", _mha("heads_reversed", reverse=True), "reverse order"),
    ("merge_heads", _mha("heads_reversed", reverse=True), "reverse order"),
    ("MultiHeadAttention", _mha("softmax_over_heads", dim=1), "the heads"),
], ids=["SA_neg_1e9", "MHA_values_not_projected", "MHA_heads_reversed", "merge_heads_reversed", "MHA_softmax_dim_1"])
def test_ch05_novel_mistakes_are_named(name, impl, words):
    message = _verdict(name, impl)
    assert "Likely mistake" in message and words in message, message


def test_ch05_examiner_answers_in_other_styles_pass():
    class MultiHeadAttention(_MHA):  # permute/reshape, weights multiplied by D_h ** -0.5
        pass

    class SelfAttention(_SA):  # masked_fill with float32's lowest value, then torch.where: correct
        fill = -3.0e38

        def forward(self, x, mask=None):
            out, w = super().forward(x, mask)
            if mask is None:
                return out, w
            w = torch.where(mask, w, torch.zeros((), dtype=w.dtype))
            return w @ self.W_v(x), w

    run_check(EXERCISES["MultiHeadAttention"], MultiHeadAttention, quiet=True)
    run_check(EXERCISES["SelfAttention"], SelfAttention, quiet=True)

    class SelfAttentionFill1e9(SelfAttention):  # the same with -1e9: the rules block says "not −1e9"
        fill = -1e9

    with pytest.raises(CheckFailure, match="far below any finite fill value"):
        run_check(EXERCISES["SelfAttention"], SelfAttentionFill1e9, quiet=True)


# ---------------------------------------------------------------- demo variants
@pytest.mark.parametrize("name", ["causal_mask", "padding_mask", "masked_softmax", "SelfAttention",
                                  "MultiHeadAttention", "split_heads", "merge_heads"])
def test_every_exercise_has_one_demo_variant(name):
    demos = [v for v in EXERCISES[name].variants if v.demo]
    assert len(demos) == 1, [v.name for v in EXERCISES[name].variants]


# ---------------------------------------------------------------- the API fact chapter 04 teaches
def test_is_causal_true_is_top_left_when_s_q_differs_from_s_k():
    from torch.nn.attention.bias import causal_lower_right

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, 8, generator=g) for n in (3, 5, 5))
    fused = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    top_left = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 5, dtype=torch.bool).tril())
    bottom_right = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 5, dtype=torch.bool).tril(2))
    assert torch.allclose(fused, top_left, atol=1e-6)
    assert not torch.allclose(fused, bottom_right, atol=1e-2)
    assert torch.allclose(F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, 5)), bottom_right, atol=1e-6)


# ---------------------------------------------------------------- notebooks
def _cells(chapter):
    nb = json.loads((ROOT / "solutions" / chapter / f"{chapter}.ipynb").read_text())
    return nb["cells"]


def _src(cell):
    s = cell["source"]
    return "".join(s) if isinstance(s, list) else s


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_quizzes_use_the_salted_api_and_spread_their_letters(chapter):
    cells = _cells(chapter)
    number = chapter[:2]
    letters = []
    for i, cell in enumerate(cells):
        gid = _gid(cell)
        if gid.startswith("quiz_"):
            assert re.match(rf'{gid.replace("quiz", "answer")} = None  # "a", "b", "c" or "d"\n### BEGIN SOLUTION', _src(cell)), i
        if not gid.startswith("test_quiz_"):
            continue
        k = gid.rsplit("_", 1)[1]
        src = _src(cell)
        letter = re.search(r'assert answer_\d+\.strip\(\)\.lower\(\) == "([a-d])"', src).group(1)
        qid = re.search(r'qid="([^"]+)"', src).group(1)
        key = re.search(r'key="([0-9a-f]+)"', src).group(1)
        hint = re.search(r'hint="([^"]+)"', src).group(1)
        assert qid == f"{number}.q{k}" and key == quiz_key(letter, qid=qid), (i, qid)
        options = dict(re.findall(r"^- ([a-d])\) (.+)$", _src(cells[i - 2]), flags=re.M))
        assert len(options) == 4, (i, "options as a list a) .. d)")
        assert options[letter][:40] not in hint and f'"{letter}"' not in hint and f"({letter})" not in hint, (i, hint)
        letters.append(letter)
    assert len(letters) >= 3 and len(set(letters)) >= 3, letters


GRADED = {"causal_mask", "padding_mask", "masked_softmax", "SelfAttention", "MultiHeadAttention"}


def _top_level_uses(body: str) -> set:
    """Names of learner functions/classes read by the statements a cell runs (not inside def/class)."""
    import ast

    names = set()
    for stmt in ast.parse(body).body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            continue
        names |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id in GRADED}
    return names


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_demo_cells_that_call_learner_code_wait_for_it(chapter):
    section_has_uses = False
    for i, cell in enumerate(_cells(chapter)):
        src = _src(cell)
        if cell["cell_type"] == "markdown":
            if re.match(r"#{2,3} \d", src.lstrip()):
                section_has_uses = False  # a new section or subsection
            continue
        if _gid(cell) or cell.get("id") == "setup":
            continue  # answer and test cells never wait; nor does the set-up cell (tools/setup_cell.py)
        if "uses(" in src:
            section_has_uses = True
            assert not src.startswith("%%needs"), (chapter, i)
            continue
        body = src.split("\n", 1)[1] if src.startswith("%%needs") else src
        used = _top_level_uses(body)
        if not used:
            continue
        assert src.startswith("%%needs"), (chapter, i, sorted(used))
        needs = set(src.splitlines()[0].split()[1:])
        assert used <= needs, (chapter, i, sorted(used - needs))
        assert section_has_uses, (chapter, i, "the section calls a learner function without uses(...)")


def test_masked_softmax_meets_a_row_of_very_negative_scores():
    """Issue 16 §1: a max clamped at 0 (or a running max that starts at 0) returns zeros for a row
    whose scores are all far below 0; a case has such a row, and the mistake is named."""
    def masked_softmax(scores, mask):
        s = scores.masked_fill(~mask, float("-inf"))
        e = torch.exp(s - s.amax(dim=-1, keepdim=True).clamp_min(0.0))
        return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)

    message = _verdict("masked_softmax", masked_softmax)
    assert "far below 0" in message and "clamped at 0" in message, message


def test_ch05_buffers_and_second_names_for_the_named_layers_pass():
    """Rule 7 / issue 16 §2: a buffer is not a parameter, and a layer also held in a ModuleList is
    still the one parameter the prompt names."""
    class SelfAttention(_SA):
        def __init__(self, d_model, d_k=None, d_v=None):
            super().__init__(d_model, d_k, d_v)
            self.register_buffer("inv_scale", torch.tensor(1.0 / math.sqrt(self.W_q.out_features)))

        def forward(self, x, mask=None):
            q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
            s = q @ k.transpose(-2, -1) * self.inv_scale
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            w = s.softmax(-1).nan_to_num(0.0)
            return w @ v, w

    class MultiHeadAttention(_MHA):
        def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
            super().__init__(d_model, num_heads, dropout, bias)
            self.projections = nn.ModuleList([self.W_q, self.W_k, self.W_v])

    run_check(EXERCISES["SelfAttention"], SelfAttention, quiet=True)
    run_check(EXERCISES["MultiHeadAttention"], MultiHeadAttention, quiet=True)


def test_ch05_an_extra_parameter_is_still_refused():
    class SelfAttention(_SA):
        def __init__(self, d_model, d_k=None, d_v=None):
            super().__init__(d_model, d_k, d_v)
            self.W_o = nn.Linear(self.W_v.out_features, self.W_v.out_features, bias=False)  # not in the prompt

    message = _verdict("SelfAttention", SelfAttention)
    assert "W_o.weight" in message, message
