"""The Kubernetes operator: fleetshare governing a real cluster through its API server.

I/O around the same decisions the simulator and the service make: ``kube.py`` (a JSON client
over the official ``kubernetes`` client), ``watch.py`` (list and watch into a store),
``objects.py`` (Node, Job and Pod objects as model objects; pure), ``cluster.py`` (the
``Cluster`` backend: admission by scheduling gates and Job suspension, preemption by the
Eviction API), ``crds.py`` (Team and ClusterPolicy CRDs and the policy they hold),
``status.py`` (Team status), ``events.py``, ``lease.py`` (leader election), ``webhook.py``
(the mutating admission webhook that gates governed pods), ``kinds.py`` (the kinds registry's
kinds, :mod:`fleetshare.manifests.kinds`, as API resources and the admission patch; pure),
``chart.py`` (the Helm chart's generated webhooks and RBAC), ``nodeclaims.py`` (the autoscaler's
launches as NodeClaims), ``drain.py`` (drains through the Eviction API),
``scaledobjects.py`` (KEDA ScaledObjects' Deployments scaled by the live scaler),
``metrics.py`` and ``controller.py`` (the loop).
"""
