"""Alembic's environment: migrations run on the connection ``Store.create`` passes in
(inside its write transaction, so two replicas starting at once migrate one after the other).
"""

from alembic import context

from fleetshare.service.store import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
