"""Annotation: human triple-wise and AI pairwise judgments turned into consistent partial rankings.

Done so far: `resolve` (the paper's Algorithm 1, pure) and `annotation_file` (the
`cheems resolve` input format). Storage, AI judging, distant supervision and debiasing follow.
"""
