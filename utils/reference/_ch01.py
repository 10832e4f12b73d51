"""Chapter 01 — motivation: the query-key-value framework, attention as a weighted average."""
from .._guard import reference
from ._common import masked_softmax_impl

__all__ = ["dot_product_score", "attention_pooling"]


@reference
def dot_product_score(query, keys):
    """The unscaled dot-product score of every query with every key: query @ keysᵀ.

    Shapes:
        query: (..., S_q, D)   keys: (..., S_k, D)   returns scores (..., S_q, S_k)
    """
    return query @ keys.transpose(-2, -1)  # (..., S_q, D) x (..., D, S_k) -> (..., S_q, S_k)


@reference
def attention_pooling(query, keys, values, score_fn, mask=None):
    """Attention as a weighted average of the values: softmax over the keys of score_fn(query, keys).

    Shapes:
        query: (..., S_q, D)   keys: (..., S_k, D)   values: (..., S_k, D_v)
        score_fn(query, keys) -> (..., S_q, S_k), any scoring rule (dot product, additive, ...)
        mask: bool, broadcastable to (..., S_q, S_k); True = may attend
        returns context (..., S_q, D_v) and weights (..., S_q, S_k)

    A fully masked query row gets zero weights and a zero context.
    """
    scores = score_fn(query, keys)  # (..., S_q, S_k)
    weights = masked_softmax_impl(scores, mask)  # (..., S_q, S_k), each row sums to 1 (or 0)
    context = weights @ values  # (..., S_q, S_k) x (..., S_k, D_v) -> (..., S_q, D_v)
    return context, weights
