"""Shared package of the attention course.

- ``utils.reference``: the reference implementation of every graded exercise.
- ``utils.checks``: one learner-facing check per exercise, e.g. ``check_softmax(softmax)``.
- ``utils.plotting``: heatmaps, head grids, masks and cost curves, one shared style.
"""
