"""Where a training was reported: the tracking runs of a training and of the model it made.

- trainings.tracking and models.tracking: {backend: id} of the runs that reported the training (trainer.tracking):
  "tensorboard" its log directory, "mlflow" the MLflow run id, "wandb" the W&B run id; NULL for trainings and models
  stored before this revision, and for models registered from elsewhere.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trainings") as batch:
        batch.add_column(sa.Column("tracking", sa.JSON(), nullable=True))
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("tracking", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("tracking")
    with op.batch_alter_table("trainings") as batch:
        batch.drop_column("tracking")
