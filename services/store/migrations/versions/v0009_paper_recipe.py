"""The paper's recipe in the store: what a dataset was made with, why a response was filtered, doubled triples.

- datasets.details: the recipe's settings (supervisor, distant-supervision margins, debias seed, rule-filter
  thresholds) and its counts per source before and after each step (NULL for datasets made before this revision);
- responses.filter_reason: the rule the rule-based filter found broken ("too_long", "non_chinese", ...), NULL when
  the response was kept (every response stored before this revision);
- annotation_tasks.copy: 0 for a task, 1 for the second, independent annotation of the same triple (double
  annotation of a share of the triples, for agreement).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("details", sa.JSON(), nullable=True))
    with op.batch_alter_table("responses") as batch:
        batch.add_column(sa.Column("filter_reason", sa.String(32), nullable=True))
    with op.batch_alter_table("annotation_tasks") as batch:
        batch.add_column(sa.Column("copy", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("annotation_tasks") as batch:
        batch.drop_column("copy")
    with op.batch_alter_table("responses") as batch:
        batch.drop_column("filter_reason")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("details")
