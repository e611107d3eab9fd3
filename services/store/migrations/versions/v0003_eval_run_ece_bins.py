"""Evaluation runs remember their calibration bins: eval_runs.ece_bins (5, the old fixed value, for earlier runs).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("eval_runs") as batch:
        batch.add_column(sa.Column("ece_bins", sa.Integer(), server_default="5", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("eval_runs") as batch:
        batch.drop_column("ece_bins")
