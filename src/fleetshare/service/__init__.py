"""``fleetshare serve``: the control loop as a long-running service.

``store.py`` (SQLAlchemy tables, SQLite by default), ``backend.py`` (the embedded
:class:`~fleetshare.control.cluster.Cluster`), ``plane.py`` (the loop thread, restart from the
store), ``auth.py`` (scoped bearer tokens), ``api.py`` (the FastAPI app), ``metrics.py``
(Prometheus), ``limits.py`` (request size and shape), ``client.py`` (the CLI's HTTP client),
``config.py`` (the config file).
"""
