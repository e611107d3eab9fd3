"""Model lifecycle: a state per model, the `production` alias, and every transition recorded.

Models registered before this revision become candidates; nothing is production until a promotion.
A model registered from a directory (not by a training) has no dataset, recipe or training.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)
STATES = "'candidate', 'evaluated', 'production', 'rejected', 'retired'"
ACTIONS = "'registered', 'evaluated', 'promoted', 'demoted', 'rolled_back', 'rejected', 'retired'"


def models_0007() -> sa.Table:
    """The models table as revision 0005 made it: SQLite rebuilds it from this, so the SQL of an offline
    upgrade (`migrate sql`) needs no live table to reflect."""
    return sa.Table(
        "models",
        sa.MetaData(),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("dataset_id", sa.String(64), nullable=False),
        sa.Column("recipe", sa.String(64), nullable=False),
        sa.Column("dataset_recipe", sa.String(64), nullable=False),
        sa.Column("training_id", sa.String(64), nullable=False),
        sa.Column("overall", sa.Double(), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], name="fk_models_dataset_id_datasets"),
        sa.ForeignKeyConstraint(["training_id"], ["trainings.id"], name="fk_models_training_id_trainings"),
        sa.PrimaryKeyConstraint("id", name="pk_models"),
        sa.UniqueConstraint("training_id", name="uq_models_training_id"),
    )


def upgrade() -> None:
    with op.batch_alter_table("models", copy_from=models_0007()) as batch:
        for column in ("dataset_id", "recipe", "dataset_recipe", "training_id"):
            batch.alter_column(column, existing_type=sa.String(64), nullable=True)
        batch.add_column(sa.Column("state", sa.String(16), nullable=False, server_default="candidate"))
        batch.add_column(sa.Column("source", sa.String(16), nullable=False, server_default="training"))
        batch.create_check_constraint("ck_models_state", sa.text(f"state IN ({STATES})"))
        batch.create_check_constraint("ck_models_source", sa.text("source IN ('training', 'registered')"))
    op.create_table(
        "model_aliases",
        sa.Column("alias", sa.String(64), nullable=False),
        sa.Column("model_id", sa.String(64), nullable=True),
        sa.Column("updated_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_model_aliases_model_id_models")),
        sa.PrimaryKeyConstraint("alias", name=op.f("pk_model_aliases")),
    )
    # The row exists from the start, so the first promotion can lock it like every later one.
    op.execute("INSERT INTO model_aliases (alias, model_id, updated_at) VALUES ('production', NULL, CURRENT_TIMESTAMP)")
    op.create_table(
        "model_transitions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("model_id", sa.String(64), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.CheckConstraint(f"action IN ({ACTIONS})", name=op.f("ck_model_transitions_action")),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_model_transitions_model_id_models")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_transitions")),
    )
    op.create_index(op.f("ix_model_transitions_model_id"), "model_transitions", ["model_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_model_transitions_model_id"), table_name="model_transitions")
    op.drop_table("model_transitions")
    op.drop_table("model_aliases")
    with op.batch_alter_table("models") as batch:
        batch.drop_constraint("ck_models_source", type_="check")
        batch.drop_constraint("ck_models_state", type_="check")
        batch.drop_column("source")
        batch.drop_column("state")
