"""Initial schema: prompts, responses, annotation_tasks, annotations, rankings, exports.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 06:01:35
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prompts",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("system_prompt", sa.Text(), nullable=True),
        sa.Column("category", sa.JSON(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_prompts")),
    )
    op.create_table(
        "responses",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("prompt_id", sa.String(length=64), nullable=False),
        sa.Column("response_key", sa.String(length=128), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(["prompt_id"], ["prompts.id"], name=op.f("fk_responses_prompt_id_prompts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_responses")),
        sa.UniqueConstraint("prompt_id", "response_key", name=op.f("uq_responses_prompt_id_response_key")),
    )
    op.create_table(
        "annotation_tasks",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("prompt_id", sa.String(length=64), nullable=False),
        sa.Column("response_keys", sa.JSON(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('triple', 'pair')", name=op.f("ck_annotation_tasks_kind")),
        sa.CheckConstraint("status IN ('open', 'done')", name=op.f("ck_annotation_tasks_status")),
        sa.ForeignKeyConstraint(["prompt_id"], ["prompts.id"], name=op.f("fk_annotation_tasks_prompt_id_prompts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_annotation_tasks")),
    )
    op.create_index(op.f("ix_annotation_tasks_prompt_id"), "annotation_tasks", ["prompt_id"])
    op.create_table(
        "annotations",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("prompt_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=128), nullable=True),
        sa.Column("annotator", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("discarded", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('human', 'ai')", name=op.f("ck_annotations_kind")),
        sa.ForeignKeyConstraint(["prompt_id"], ["prompts.id"], name=op.f("fk_annotations_prompt_id_prompts")),
        sa.ForeignKeyConstraint(
            ["task_id"], ["annotation_tasks.id"], name=op.f("fk_annotations_task_id_annotation_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_annotations")),
    )
    op.create_index(op.f("ix_annotations_prompt_id"), "annotations", ["prompt_id"])
    op.create_table(
        "rankings",
        sa.Column("prompt_id", sa.String(length=64), nullable=False),
        sa.Column("rank", sa.JSON(), nullable=False),
        sa.Column("conflicts", sa.Integer(), nullable=False),
        sa.Column("merged_nodes", sa.Integer(), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["prompt_id"], ["prompts.id"], name=op.f("fk_rankings_prompt_id_prompts")),
        sa.PrimaryKeyConstraint("prompt_id", name=op.f("pk_rankings")),
    )
    op.create_table(
        "exports",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("records", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('bench', 'preference')", name=op.f("ck_exports_kind")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exports")),
    )


def downgrade() -> None:
    op.drop_table("exports")
    op.drop_table("rankings")
    op.drop_index(op.f("ix_annotations_prompt_id"), table_name="annotations")
    op.drop_table("annotations")
    op.drop_index(op.f("ix_annotation_tasks_prompt_id"), table_name="annotation_tasks")
    op.drop_table("annotation_tasks")
    op.drop_table("responses")
    op.drop_table("prompts")
