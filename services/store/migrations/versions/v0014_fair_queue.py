"""A fair, fast annotation queue: who holds a task lives on the task row, and the queue's reads are index scans.

- annotation_tasks.held_by / held_at: the holder of an open task and when they claimed or last opened it (the lease
  runs from there), filled from task_claims for the open tasks (the newest claim of a task is its holder's, ties by
  name, as before); task_claims stays the history of who ever held a task;
- partial indexes on the open tasks: nobody's, by kind and age (the free queue); held, by holder and by kind and
  lease age (with the kind, SQLite's planner takes it over the status index for the leases that ran out);
- annotations(annotator, prompt_id): how much of a prompt a person did, per candidate task;
- annotation_tasks(prompt_id, status): a prompt's open tasks, counted by each submit (without it SQLite's planner
  counts them through the status index, every open task of the queue);
- annotators.queue_from / queue_rule: where a person's scan of the free triples starts (before it, every free triple
  was one they may never take under that rule), NULL: from the oldest.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)
OPEN_FREE = "status = 'open' AND held_by IS NULL"
OPEN_HELD = "status = 'open' AND held_by IS NOT NULL"
PARTIAL = {
    "ix_annotation_tasks_free": (OPEN_FREE, ["kind", "created_at", "id"]),
    "ix_annotation_tasks_held_by": (OPEN_HELD, ["held_by", "created_at", "id"]),
    "ix_annotation_tasks_held_at": (OPEN_HELD, ["kind", "held_at", "id"]),
}
NEWEST = "FROM task_claims c WHERE c.task_id = annotation_tasks.id ORDER BY c.claimed_at DESC, c.annotator LIMIT 1"


def upgrade() -> None:
    with op.batch_alter_table("annotation_tasks") as batch:
        batch.add_column(sa.Column("held_by", sa.String(200), nullable=True))
        batch.add_column(sa.Column("held_at", TIME, nullable=True))
    with op.batch_alter_table("annotators") as batch:
        batch.add_column(sa.Column("queue_from", TIME, nullable=True))
        batch.add_column(sa.Column("queue_rule", sa.Integer(), nullable=True))
    op.execute(
        f"UPDATE annotation_tasks SET held_by = (SELECT c.annotator {NEWEST}), held_at = (SELECT c.claimed_at {NEWEST})"
        " WHERE status = 'open' AND EXISTS (SELECT 1 FROM task_claims c WHERE c.task_id = annotation_tasks.id)"
    )
    for name, (where, columns) in PARTIAL.items():
        clause = sa.text(where)
        op.create_index(name, "annotation_tasks", columns, postgresql_where=clause, sqlite_where=clause)
    op.create_index("ix_annotations_annotator_prompt_id", "annotations", ["annotator", "prompt_id"])
    op.create_index("ix_annotation_tasks_prompt_id_status", "annotation_tasks", ["prompt_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_annotation_tasks_prompt_id_status", table_name="annotation_tasks")
    op.drop_index("ix_annotations_annotator_prompt_id", table_name="annotations")
    for name in PARTIAL:
        op.drop_index(name, table_name="annotation_tasks")
    with op.batch_alter_table("annotators") as batch:
        batch.drop_column("queue_rule")
        batch.drop_column("queue_from")
    with op.batch_alter_table("annotation_tasks") as batch:
        batch.drop_column("held_at")
        batch.drop_column("held_by")
