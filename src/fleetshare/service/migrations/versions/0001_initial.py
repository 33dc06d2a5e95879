"""The first schema (as ``fleetshare serve`` created it before migrations existed).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.create_table(
        "policy_versions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("source_format", sa.String(16), nullable=False),
        sa.Column("document", sa.JSON, nullable=False),
        sa.Column("original", sa.JSON),
        sa.Column("author", sa.String(128), nullable=False),
    )
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(253), nullable=False, unique=True),
        sa.Column("team", sa.String(253), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("priority_class", sa.String(253)),
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("pending_since", sa.Float, nullable=False),
        sa.Column("admitted_at", sa.Float),
        sa.Column("first_admitted_at", sa.Float),
        sa.Column("finished_at", sa.Float),
        sa.Column("assignment", sa.JSON),
        sa.Column("borrowed", sa.JSON),
        sa.Column("preemptions", sa.Integer, nullable=False),
        sa.Column("submitted_by", sa.String(128), nullable=False),
    )
    op.create_index("ix_workloads_team_id", "workloads", ["team", "id"])
    op.create_index("ix_workloads_state_id", "workloads", ["state", "id"])
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(253), primary_key=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("pool", sa.String(253)),
        sa.Column("instance_type", sa.String(64)),
        sa.Column("zone", sa.String(64)),
        sa.Column("capacity_type", sa.String(16), nullable=False),
        sa.Column("allocatable", sa.JSON, nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("taints", sa.JSON, nullable=False),
        sa.Column("ready", sa.Boolean, nullable=False),
        sa.Column("unschedulable", sa.Boolean, nullable=False),
        sa.Column("healthy", sa.Boolean, nullable=False),
        sa.Column("price_per_hour", sa.Float),
        sa.Column("instance", sa.JSON),
        sa.Column("joined_at", sa.Float),
        sa.Column("left_at", sa.Float),
        sa.Column("leave_reason", sa.Text),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("workload", sa.String(253)),
        sa.Column("team", sa.String(253)),
        sa.Column("details", sa.JSON, nullable=False),
    )
    op.create_index("ix_events_team_id", "events", ["team", "id"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("scope", sa.String(300), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("policy_version", sa.Integer, sa.ForeignKey("policy_versions.id")),
        sa.Column("details", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "audit_log",
        "api_tokens",
        "events",
        "nodes",
        "workloads",
        "policy_versions",
        "meta",
    ):
        op.drop_table(table)
