"""The event outbox (events stored with the change they announce, relayed to Kafka after the commit), and an
index for listing open annotation tasks oldest first.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("topic", sa.String(200), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
    )
    op.create_index("ix_annotation_tasks_status_created_at", "annotation_tasks", ["status", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_annotation_tasks_status_created_at", table_name="annotation_tasks")
    op.drop_table("outbox")
