"""Alembic migrations of the service's store (run by ``Store.create``: ``upgrade head``)."""
