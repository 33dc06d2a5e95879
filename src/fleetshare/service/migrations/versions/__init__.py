"""Alembic revisions, oldest first: ``0001`` the first schema, ``0002`` leases."""
