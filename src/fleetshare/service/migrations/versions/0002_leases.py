"""Leases: which replica runs the control loop (and meta loses its schema_version: Alembic
keeps the version now).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(300), nullable=False),
        sa.Column("term", sa.Integer, nullable=False),
        sa.Column("acquired_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.execute("DELETE FROM meta WHERE key = 'schema_version'")


def downgrade() -> None:
    op.drop_table("leases")
