"""Annotator accounts (personal tokens, stored as sha256) and the claims that give a task to one annotator.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "annotators",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_annotators")),
        sa.UniqueConstraint("token_sha256", name=op.f("uq_annotators_token_sha256")),
    )
    op.create_table(
        "task_claims",
        sa.Column("task_id", sa.String(128), nullable=False),
        sa.Column("annotator", sa.String(200), nullable=False),
        sa.Column("claimed_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["annotation_tasks.id"], name=op.f("fk_task_claims_task_id_annotation_tasks")
        ),
        sa.ForeignKeyConstraint(["annotator"], ["annotators.name"], name=op.f("fk_task_claims_annotator_annotators")),
        sa.PrimaryKeyConstraint("task_id", "annotator", name=op.f("pk_task_claims")),
    )
    op.create_index(op.f("ix_task_claims_annotator"), "task_claims", ["annotator"])


def downgrade() -> None:
    op.drop_index(op.f("ix_task_claims_annotator"), table_name="task_claims")
    op.drop_table("task_claims")
    op.drop_table("annotators")
