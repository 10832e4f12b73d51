"""Checks for chapter 02 — additive (Bahdanau) attention."""
import torch

from .. import reference as ref
from .._guard import unguarded
from ._core import Case, Exercise, Mutant, generator, randn, random_padding_mask, rng
from ._forbid import MHA, SDPA
from ._registry import register

__all__ = ["check_AdditiveAttention"]


def _cases(seed: int) -> list:
    r, g = rng(seed), generator(seed)
    cases = []

    def add(label, batch, s_q, s_k, dq, dk, attn_dim, d_v, mask=None, scale=1.0):
        module = ref.AdditiveAttention(dq, dk, attn_dim)
        # Random parameters (shared with your module by name), large enough that tanh bends.
        state = {name: randn(*p.shape, gen=g) for name, p in module.state_dict().items()}
        q = randn(batch, s_q, dq, gen=g, scale=scale)
        k = randn(batch, s_k, dk, gen=g, scale=scale)
        v = randn(batch, s_k, d_v, gen=g)
        label = (f"{label}: AdditiveAttention({dq}, {dk}, {attn_dim}), query {tuple(q.shape)}, "
                 f"keys {tuple(k.shape)}, values {tuple(v.shape)}")
        if mask is not None:
            label += f", mask {tuple(mask.shape)}"
        init = {"ctor": (dq, dk, attn_dim), "ctor_kwargs": {}, "seed": seed, "state": state}
        cases.append(Case(label, (q, k, v), {"mask": mask} if mask is not None else {}, init=init))

    add("S_q ≠ S_k, all sizes different", 2, 3, 5, 4, 6, 8, 3)
    add("S_q = S_k (each query must see every key)", 2, 4, 4, 3, 3, 5, 2)
    add("S_q = S_k, query_dim ≠ key_dim", 3, 5, 5, 2, 6, 4, 4)
    add("a single decoder step (S_q = 1)", 2, 1, 6, 5, 3, 7, 4)
    add("a single query and key (S = 1)", 1, 1, 1, 3, 2, 4, 5)
    add("attn_dim = 1", 2, 3, 4, 3, 3, 1, 2)
    add("large-magnitude inputs (tanh saturates)", 2, 4, 3, 6, 4, 8, 3, scale=20.0)
    add("mask: some keys hidden", 2, 4, 6, 5, 4, 6, 3, mask=random_padding_mask(2, 4, 6, g))
    add("mask with a fully masked query row, S_q = S_k", 2, 5, 5, 3, 4, 6, 2,
        mask=random_padding_mask(2, 5, 5, g, fully_masked_row=True))
    key_pad = torch.ones(3, 1, 6, dtype=torch.bool)
    key_pad[0, :, 3:] = False
    key_pad[2] = False  # an empty source sentence: every query row is fully masked
    add("padding mask (B, 1, S_k), one sequence of length 0", 3, 4, 6, 4, 5, 6, 3, mask=key_pad)
    add("causal mask (S_q, S_k)", 2, 5, 5, 4, 4, 4, 3, mask=torch.ones(5, 5, dtype=torch.bool).tril())
    for i in range(6):  # random sizes, odd ones included; half of them with S_q = S_k
        b, s_q = r.randint(1, 3), r.randint(1, 7)
        s_k = s_q if i % 2 == 0 else r.randint(1, 7)
        dq, dk, attn_dim, d_v = (r.choice([1, 2, 3, 5, 8]) for _ in range(4))
        m = None
        if i % 3 == 1:
            m = torch.rand(b, s_q, s_k, generator=g) > 0.4
            m[..., 0] = True
        add(f"random case {i + 1}", b, s_q, s_k, dq, dk, attn_dim, d_v, mask=m)
    return cases


_Ref = unguarded(ref.AdditiveAttention)


def _attend(scores, values, mask, dim=-1, fill=float("-inf"), nan_to_zero=True):
    """Masked softmax over the keys and the weighted sum of the values, mistakes switchable."""
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    w = torch.softmax(scores, dim=dim)
    if nan_to_zero:
        w = w.nan_to_num(0.0)
    return w @ values, w


class _NoTanh(_Ref):
    def forward(self, query, keys, values, mask=None):
        features = self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1)
        return _attend(self.w_v(features).squeeze(-1), values, mask)


class _TanhOutside(_Ref):
    def forward(self, query, keys, values, mask=None):
        features = self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1)
        return _attend(torch.tanh(self.w_v(features).squeeze(-1)), values, mask)


class _PairsQiWithKi(_Ref):
    """Tiles queries and keys with `repeat` for both: entry (i, j) pairs key j with query (i·S_k + j) mod S_q.

    With S_q = S_k that is query j with key j — the q_i + k_i pairing, the same for every row.
    """

    def forward(self, query, keys, values, mask=None):
        B, S_q, _ = query.shape
        S_k = keys.size(1)
        q = self.W_q(query).repeat(1, S_k, 1)  # (B, S_q*S_k, A), should be repeat_interleave
        k = self.W_k(keys).repeat(1, S_q, 1)  # (B, S_q*S_k, A)
        scores = self.w_v(torch.tanh(q + k)).view(B, S_q, S_k)
        return _attend(scores, values, mask)


class _ViewNotTranspose(_Ref):
    """Builds (B, S_k, S_q) scores and reshapes them with view instead of transposing."""

    def forward(self, query, keys, values, mask=None):
        B, S_q, _ = query.shape
        S_k = keys.size(1)
        features = torch.tanh(self.W_q(query).unsqueeze(1) + self.W_k(keys).unsqueeze(2))  # (B, S_k, S_q, A)
        scores = self.w_v(features).squeeze(-1).view(B, S_q, S_k)
        return _attend(scores, values, mask)


class _DotProduct(_Ref):
    def forward(self, query, keys, values, mask=None):
        scores = self.W_q(query) @ self.W_k(keys).transpose(-2, -1)
        return _attend(scores, values, mask)


class _ScoreMixin(_Ref):
    def scores(self, query, keys):
        features = torch.tanh(self.W_q(query).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        return self.w_v(features).squeeze(-1)


class _WrongDim(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys), values, mask, dim=1)


class _MaskIgnored(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys), values, None)


class _InvertedMask(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys), values, None if mask is None else ~mask)


class _MaskAfterSoftmax(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        w = torch.softmax(self.scores(query, keys), dim=-1)
        if mask is not None:
            w = w * mask
        return w @ values, w


class _Neg1e9(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys), values, mask, fill=-1e9)


class _NanRows(_ScoreMixin):
    def forward(self, query, keys, values, mask=None):
        return _attend(self.scores(query, keys), values, mask, nan_to_zero=False)


MUTANTS = [
    Mutant("no_tanh", "the tanh is missing: score = w_vᵀ tanh(W_q q + W_k k); without it the score is linear and splits into a query part plus a key part.", _NoTanh),
    Mutant("tanh_after_w_v", "the tanh was applied after w_v: apply it to W_q q + W_k k (the hidden layer), then project with w_v.", _TanhOutside),
    Mutant("pairs_q_i_with_k_i", "score (i, j) does not pair query i with key j (q + k without unsqueeze pairs q_i with k_i only; `repeat` on both tiles the wrong query): broadcast W_q(query).unsqueeze(2) + W_k(keys).unsqueeze(1) to (B, S_q, S_k, attn_dim).", _PairsQiWithKi),
    Mutant("view_instead_of_transpose", "the scores were built as (B, S_k, S_q) and reshaped with view, which scrambles query and key: build them as (B, S_q, S_k) (query.unsqueeze(2) + keys.unsqueeze(1)) or use transpose.", _ViewNotTranspose),
    Mutant("dot_product_scores", "the scores are dot products (W_q q)·(W_k k): additive attention scores with w_vᵀ tanh(W_q q + W_k k).", _DotProduct),
    Mutant("softmax_wrong_dim", "the softmax was taken over the query dim instead of the key dim (-1): each query's weights over the keys must sum to 1.", _WrongDim),
    Mutant("mask_ignored", "the mask was ignored: set the scores to -inf where the mask is False before the softmax.", _MaskIgnored),
    Mutant("inverted_mask", "the mask is inverted: True means 'may attend', so fill the scores where the mask is False.", _InvertedMask),
    Mutant("mask_after_softmax", "the mask was applied after the softmax, so the remaining weights no longer sum to 1: mask the scores with -inf before the softmax.", _MaskAfterSoftmax),
    Mutant("neg_1e9_fully_masked", "a fully masked row got uniform weights: filling with -1e9 (or a large negative number) spreads the weight evenly when every key is masked; such a row must give zero weights and a zero context.", _Neg1e9),
    Mutant("nan_fully_masked", "a fully masked row gave NaN: softmax over a row of -inf is 0/0; replace those rows with zeros (e.g. nan_to_num or torch.where).", _NanRows),
]

EXERCISE = Exercise(
    name="AdditiveAttention",
    reference=ref.AdditiveAttention,
    make_cases=_cases,
    kind="class",
    forbidden=(SDPA, MHA),
    mutants=MUTANTS,
    output_names=("context", "weights"),
)
check_AdditiveAttention = register(EXERCISE)
