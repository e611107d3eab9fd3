"""The training registry: datasets, trainings and models; evaluation runs name the model they evaluate.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("recipe", sa.String(64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("prompts", sa.Integer(), nullable=False),
        sa.Column("pairs", sa.Integer(), nullable=False),
        sa.Column("rankings", sa.Integer(), nullable=False),
        sa.Column("supervisor_model_id", sa.String(64), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
    )
    op.create_table(
        "trainings",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("recipe", sa.String(64), nullable=False),
        sa.Column("overrides", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("launcher", sa.String(16), nullable=False),
        sa.Column("out_dir", sa.Text(), nullable=False),
        sa.Column("handle", sa.Text(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("total_steps", sa.Integer(), nullable=False),
        sa.Column("loss", sa.Double(), nullable=True),
        sa.Column("overall", sa.Double(), nullable=True),
        sa.Column("model_id", sa.String(64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.CheckConstraint(
            "state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')", name=op.f("ck_trainings_state")
        ),
        sa.CheckConstraint("launcher IN ('local', 'kubernetes')", name=op.f("ck_trainings_launcher")),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], name=op.f("fk_trainings_dataset_id_datasets")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trainings")),
    )
    op.create_table(
        "models",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("recipe", sa.String(64), nullable=False),
        sa.Column("dataset_recipe", sa.String(64), nullable=False),
        sa.Column("training_id", sa.String(64), nullable=False),
        sa.Column("overall", sa.Double(), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], name=op.f("fk_models_dataset_id_datasets")),
        sa.ForeignKeyConstraint(["training_id"], ["trainings.id"], name=op.f("fk_models_training_id_trainings")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("training_id", name=op.f("uq_models_training_id")),
    )
    with op.batch_alter_table("eval_runs") as batch:
        batch.add_column(sa.Column("model_id", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("eval_runs") as batch:
        batch.drop_column("model_id")
    op.drop_table("models")
    op.drop_table("trainings")
    op.drop_table("datasets")
