"""Evaluation runs fed through Kafka: eval_runs, eval_scores.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "eval_runs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("bench_files", sa.JSON(), nullable=False),
        sa.Column("scorer_url", sa.Text(), nullable=False),
        sa.Column("semantics", sa.String(length=16), nullable=False),
        sa.Column("items_total", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("state IN ('running', 'succeeded', 'failed')", name=op.f("ck_eval_runs_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_runs")),
    )
    op.create_table(
        "eval_scores",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("item", sa.String(length=128), nullable=False),
        sa.Column("response_ids", sa.JSON(), nullable=False),
        sa.Column("scores", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["eval_runs.id"], name=op.f("fk_eval_scores_run_id_eval_runs")),
        sa.PrimaryKeyConstraint("run_id", "item", name=op.f("pk_eval_scores")),
    )


def downgrade() -> None:
    op.drop_table("eval_scores")
    op.drop_table("eval_runs")
