"""A generative model as the reward model (paper Table 2, "Generative Models as Reward Models").

`outcomes` (pure): how a judge's two verdicts on one human-ordered pair (each response shown first
once) become one outcome, and outcomes become the bench metrics; `run`: asking an OpenAI-compatible
judge (`services.annotation.judge`) about every pair of every bench item; `output`: the table, JSON
and report of `cheems eval --judge-url`. Imports the evaluator's core and the annotation judge.
"""
