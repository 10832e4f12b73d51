"""Chapter 14–15 checks: what they accept (any structure the contract leaves open, no validation)
and what they name beyond the mutant bank (caches shared through class-level storage)."""
import pytest
import torch

from utils._guard import unguarded
from utils.checks import EXERCISES, CheckFailure, check_fit_loglog_slope, check_generate, check_TinyGPT
from utils.checks._core import run_check
from utils.checks._ch14 import STALE_OR_SHARED, _GPTBase
from utils.reference import generate as _generate

generate = unguarded(_generate)


class _ClassLevelCache:
    """The issue's KVCache mistake: lists in the class body are shared by every instance."""

    ks, vs = [], []

    def update(self, k_new, v_new):
        self.ks.append(k_new)
        self.vs.append(v_new)
        return torch.cat(self.ks, dim=-2), torch.cat(self.vs, dim=-2)


def _generate_with(cache_cls):
    def gen(model, idx, max_new_tokens, use_cache=True):
        caches = [cache_cls() for _ in model.blocks] if use_cache else None
        with torch.no_grad():
            for step in range(max_new_tokens):
                if not use_cache:
                    logits, _ = model(idx[:, -model.max_len:])
                elif step == 0:
                    logits, caches = model(idx, caches, 0)
                else:
                    logits, caches = model(idx[:, -1:], caches, idx.size(1) - 1)
                idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return idx

    return gen


def test_generate_names_caches_sharing_class_level_storage():
    with pytest.raises(CheckFailure) as info:
        check_generate(_generate_with(_ClassLevelCache))
    assert STALE_OR_SHARED in str(info.value)


def test_tinygpt_with_extra_buffers_and_helper_modules_passes(capsys):
    """Buffers (persistent or not) and parameter-free helper modules are the learner's business."""

    class WithExtras(_GPTBase):
        def __init__(self, *args):
            super().__init__(*args)
            self.register_buffer("positions", torch.arange(self.max_len))  # persistent
            self.register_buffer("scratch", torch.zeros(3), persistent=False)
            self.act = torch.nn.GELU()
            self.n_layers = len(self.blocks)

    check_TinyGPT(WithExtras)
    assert "✅" in capsys.readouterr().out


def test_tinygpt_with_attention_biases_is_told_the_parameter_names():
    class Biased(_GPTBase):
        def __init__(self, *args):
            super().__init__(*args)
            for blk in self.blocks:
                blk.attn.W_q.bias = torch.nn.Parameter(torch.zeros(blk.attn.W_q.out_features))

    with pytest.raises(CheckFailure, match=r"extra parameters .*: \['blocks\.0\.attn\.W_q\.bias'\]"):
        check_TinyGPT(Biased)


def test_slope_without_validation_passes_with_a_tip(capsys):
    def no_checks(sizes, costs):
        x = torch.log(torch.as_tensor(sizes, dtype=torch.float64))
        y = torch.log(torch.as_tensor(costs, dtype=torch.float64))
        xc = x - x.mean()
        return float((xc * (y - y.mean())).sum() / (xc * xc).sum())

    check_fit_loglog_slope(no_checks)
    out = capsys.readouterr().out
    assert "✅" in out and "Tip (not graded)" in out


def test_tinygpt_names_the_first_submodule_whose_output_differs():
    """A mistake outside the bank (another activation in the feed-forward): the check locates it by
    the prompt's sub-module names, with forward hooks on the learner's model and the reference."""
    import torch.nn as nn
    import torch.nn.functional as F

    from utils._guard import unguarded

    ex = EXERCISES["TinyGPT"]

    class SiluFFN(unguarded(ex.reference)):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for block in self.blocks:
                ffn = block.ffn
                ffn.forward = lambda x, ffn=ffn: ffn.linear2(F.silu(ffn.linear1(x)))
            assert isinstance(self, nn.Module)

    with pytest.raises(CheckFailure) as info:
        run_check(ex, SiluFFN, quiet=True)
    assert "the first whose output differs from the reference's is blocks.0.ffn.linear2" in str(info.value)
    assert "blocks.0.ffn.linear1 matches" in str(info.value)
