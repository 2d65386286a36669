"""Experiments still under study: not part of the stable API, may change or go without a deprecation period.

Each name here has a one-line status (what was measured, why it is not shipped):

- :class:`SpanScoreDistillationLoss` — score distillation (a teacher's span similarities, any embedding size).
  Status: best selection score of all runs (75.36 single pass at step 300) but STS-B dev fell 2.5 points (84.23
  against 86.7), so not shipped; kept to study a teacher of another size. ``slice-st train --distill-loss score``.

What measurements showed does not help was removed instead (listed with its figures in the docs' results page).
"""

from slice_st.experimental.span_score_distillation import SpanScoreDistillationLoss

#: One line per experiment: its status.
STATUS = {
    "SpanScoreDistillationLoss": (
        "experimental: 75.36 single pass (selection rows, step 300) but STS-B dev -2.5 (84.23); not shipped"
    ),
}

__all__ = ["SpanScoreDistillationLoss", "STATUS"]
