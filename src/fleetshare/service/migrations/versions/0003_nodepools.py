"""Node pools set through the API, versioned like the policy; nodes being drained.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nodepool_versions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("document", sa.JSON, nullable=False),
        sa.Column("author", sa.String(128), nullable=False),
    )
    # a constant default: SQLite adds it in place (no table copy)
    op.add_column(
        "nodes", sa.Column("draining", sa.Boolean, nullable=False, server_default=sa.false())
    )


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("draining")
    op.drop_table("nodepool_versions")
