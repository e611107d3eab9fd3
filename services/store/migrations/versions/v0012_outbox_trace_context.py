"""The trace context of each outbox event: outbox.trace_context, the W3C `traceparent`/`tracestate` of the change
that queued it (NULL: untraced, and every event queued before this revision), so the relay publishes the event
in the trace of the call that made the change.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("trace_context", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("trace_context")
