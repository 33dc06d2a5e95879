"""Live services registered through the API, kept in the store.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "services",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(60), nullable=False, unique=True),
        sa.Column("team", sa.String(253), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("token_id", sa.Integer, nullable=False),
        sa.Column("scope", sa.String(300), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("services")
