"""Chapter 14 samples: the correct answers, and three submissions that each carry one realistic
mistake in every exercise (`TinyGPT`, `generate`; names from the mutant banks in
utils/checks/_ch14.py) and one wrong quiz answer, so that every exercise meets three distinct
mistakes while the chapter adds only four submissions to the bank.

`generate` is checked on the check's own model, never on the submission's `TinyGPT`, so each
mistake costs exactly its own exercise.

The wrong answers are the solution's cells with one line changed, so the samples never drift from
the source (a change that no longer applies raises at build time).
"""
from __future__ import annotations

from ._chapter import Chapter

ASSIGNMENT = "14_tiny_gpt"
FULL = {"TinyGPT": 6, "generate": 4, "quiz_1": 1, "quiz_2": 1, "quiz_3": 1}


_CHAPTER = Chapter(ASSIGNMENT, FULL)
correct, _with_answers, _expect = _CHAPTER.correct, _CHAPTER.with_answers, _CHAPTER.expect


def _solution_with(grade_id: str, old: str, new: str) -> str:
    """The solution's answer cell ``grade_id`` with the line fragment ``old`` replaced by ``new``."""
    source = _CHAPTER.answers()[grade_id]
    source = "".join(source) if isinstance(source, list) else source
    if source.count(old) != 1:
        raise ValueError(f"{ASSIGNMENT}/{grade_id}: {old!r} should occur once in the solution cell")
    return source.replace(old, new)


def _tinygpt_kv_tiled() -> str:  # mutant kv_heads_repeat_not_interleave
    return _solution_with(
        "TinyGPT",
        "k = k.repeat_interleave(H // H_kv, dim=1)",
        "k = k.repeat(1, H // H_kv, 1, 1)  # tiles the kv heads (mutant kv_heads_repeat_not_interleave)",
    ).replace("v = v.repeat_interleave(H // H_kv, dim=1)", "v = v.repeat(1, H // H_kv, 1, 1)")


def _tinygpt_rope_from_zero() -> str:  # mutant rope_ignores_start_pos
    return _solution_with(
        "TinyGPT",
        "positions = torch.arange(start_pos, start_pos + S)",
        "positions = torch.arange(S)  # always from 0 (mutant rope_ignores_start_pos)",
    )


def _tinygpt_merge_without_transpose() -> str:  # mutant heads_merged_without_transpose
    return _solution_with(
        "TinyGPT",
        "out = (weights @ v).transpose(1, 2).reshape(B, S, H * D_h)",
        "out = (weights @ v).reshape(B, S, H * D_h)  # no transpose first (mutant heads_merged_without_transpose)",
    )


def _generate_refeeds() -> str:  # mutant refeeds_whole_sequence_with_cache
    return _solution_with(
        "generate",
        "logits, caches = model(idx[:, -1:], caches, start_pos=idx.size(1) - 1)",
        "logits, caches = model(idx, caches, start_pos=0)  # the whole sequence again (mutant refeeds_whole_sequence_with_cache)",
    )


def _generate_one_cache_object() -> str:  # mutant one_cache_object_for_all_layers
    return _solution_with(
        "generate",
        "caches = [KVCache() for _ in model.blocks] if use_cache else None",
        "caches = [KVCache()] * len(model.blocks) if use_cache else None  # one object (mutant one_cache_object_for_all_layers)",
    )


def _generate_start_pos_off_by_one() -> str:  # mutant start_pos_off_by_one
    return _solution_with(
        "generate",
        "start_pos=idx.size(1) - 1)",
        "start_pos=idx.size(1))  # the newest token counted as cached (mutant start_pos_off_by_one)",
    )


SAMPLES = {
    "ch14_correct": ("chapter 14: the solution's answers", correct, FULL),
    "ch14_mistakes_tiled_refeed": (
        "chapter 14: kv heads tiled with repeat, generate refeeds the whole sequence with the cache, quiz 2 'a'",
        lambda: _with_answers(TinyGPT=_tinygpt_kv_tiled(), generate=_generate_refeeds(), quiz_2='answer_2 = "a"'),
        _expect(TinyGPT=0, generate=0, quiz_2=0)),
    "ch14_mistakes_positions_shared": (
        "chapter 14: RoPE positions ignore start_pos, one cache object for every layer, quiz 1 'b'",
        lambda: _with_answers(TinyGPT=_tinygpt_rope_from_zero(), generate=_generate_one_cache_object(),
                              quiz_1='answer_1 = "b"'),
        _expect(TinyGPT=0, generate=0, quiz_1=0)),
    "ch14_mistakes_merge_start_pos": (
        "chapter 14: heads merged by reshape without the transpose, decode start_pos one too far, "
        "quiz 3 'd' (post-norm breaks the cache)",
        lambda: _with_answers(TinyGPT=_tinygpt_merge_without_transpose(), generate=_generate_start_pos_off_by_one(),
                              quiz_3='answer_3 = "d"'),
        _expect(TinyGPT=0, generate=0, quiz_3=0)),
}
