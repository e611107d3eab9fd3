"""Accounts and roles on every service: each account has a role, and a training records who asked for it.

- annotators.role: annotator | operator | admin | service | scorer-client (`cheems.roles`); it replaces the
  `admin` flag: an account that was an admin is an admin, every other one an annotator;
- trainings.requested_by: the account that started it (person:NAME, service:NAME) or policy:auto; NULL for the
  trainings stored before this revision.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TIME = sa.DateTime(timezone=True)
ROLES = "'annotator', 'operator', 'admin', 'service', 'scorer-client'"


def annotators_0009(with_role: bool = False) -> sa.Table:
    """The accounts table as revision 0007 made it (with the role column this revision adds, before the admin flag
    goes): SQLite rebuilds it from this, so the SQL of an offline upgrade (`migrate sql`) needs no live table."""
    role = [sa.Column("role", sa.String(32), nullable=False, server_default="annotator")] if with_role else []
    return sa.Table(
        "annotators",
        sa.MetaData(),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        *role,
        sa.PrimaryKeyConstraint("name", name="pk_annotators"),
        sa.UniqueConstraint("token_sha256", name="uq_annotators_token_sha256"),
    )


def upgrade() -> None:
    with op.batch_alter_table("annotators", copy_from=annotators_0009()) as batch:
        batch.add_column(sa.Column("role", sa.String(32), nullable=False, server_default="annotator"))
    accounts = sa.table("annotators", sa.column("role", sa.String), sa.column("admin", sa.Boolean))
    op.execute(accounts.update().where(accounts.c.admin == sa.true()).values(role="admin"))
    with op.batch_alter_table("annotators", copy_from=annotators_0009(with_role=True)) as batch:
        batch.drop_column("admin")
        batch.create_check_constraint("ck_annotators_role", sa.text(f"role IN ({ROLES})"))
    with op.batch_alter_table("trainings") as batch:
        batch.add_column(sa.Column("requested_by", sa.String(220), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trainings") as batch:
        batch.drop_column("requested_by")
    with op.batch_alter_table("annotators") as batch:
        batch.add_column(sa.Column("admin", sa.Boolean(), nullable=False, server_default=sa.false()))
    accounts = sa.table("annotators", sa.column("role", sa.String), sa.column("admin", sa.Boolean))
    op.execute(accounts.update().where(accounts.c.role == "admin").values(admin=True))
    with op.batch_alter_table("annotators") as batch:
        batch.drop_constraint("ck_annotators_role", type_="check")
        batch.drop_column("role")
