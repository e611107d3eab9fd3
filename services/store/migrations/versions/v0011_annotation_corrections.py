"""Corrections of annotation work: an operator or admin reassigns a task or voids an annotation, with a reason.

- annotations.voided_at: when the annotation was voided (NULL: it counts); a voided annotation's relations are
  left out of its prompt's resolution;
- annotation_corrections: every reassignment and void, kept forever: which task or annotation, whose, who did it
  (the actor, person:NAME) and why.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)
ACTIONS = "'reassigned', 'voided'"


def upgrade() -> None:
    op.add_column("annotations", sa.Column("voided_at", TIME, nullable=True))
    op.create_table(
        "annotation_corrections",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("task_id", sa.String(128), nullable=True),
        sa.Column("annotation_id", sa.String(128), nullable=True),
        sa.Column("annotator", sa.String(200), nullable=False),
        sa.Column("previous", sa.String(200), nullable=True),
        sa.Column("actor", sa.String(220), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.CheckConstraint(f"action IN ({ACTIONS})", name=op.f("ck_annotation_corrections_action")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_annotation_corrections")),
    )


def downgrade() -> None:
    op.drop_table("annotation_corrections")
    with op.batch_alter_table("annotations") as batch:
        batch.drop_column("voided_at")
