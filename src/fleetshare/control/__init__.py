"""The control loop above governance and autoscaling: observe a cluster backend, decide, act.

``clock.py`` (virtual or wall time), ``cluster.py`` (the backend protocol), ``loop.py`` (the
loop), ``autoscaler/`` (provisioning and disruption carried out against a cloud provider).
Nothing below this package imports it.
"""
