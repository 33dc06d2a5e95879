"""Kubernetes workload manifests as workloads: pure reading, dict in, model objects out.

A Kueue user's jobs are Kubernetes objects. :func:`parse_manifests` turns them into
:class:`ManifestWorkload` s (name, namespace, kind, queue, priority class, pod sets, duration,
submit time, order, labels, notes), which the scenario loader resolves against a policy and the
Kubernetes operator can reuse. Nothing here reads a file, a clock or a cluster.

**Kinds** (:mod:`.kinds`, one module per kind, counts their pods as Kueue does; the table is
in ``docs/kinds.md``): ``batch/v1`` Job, JobSet, the Kubeflow PyTorchJob, TFJob, PaddleJob,
XGBoostJob, JAXJob and MPIJob, RayCluster, RayJob (with its submitter pod) and RayService,
AppWrapper, SparkApplication, ``v1`` Pod (one pod, or a pod group: pods sharing the label
``kueue.x-k8s.io/pod-group-name`` with ``kueue.x-k8s.io/pod-group-total-count`` pods in all),
and, read as the pods or Jobs they create (as Kueue queues them), Deployment (each pod a
workload), StatefulSet (one pod group), LeaderWorkerSet (a pod group per replica) and CronJob
(one run's Job); ``v1`` List of those; ``scheduling.k8s.io/v1`` PriorityClasses, read apart
(:func:`pod_priority_classes`: what a pod template's ``priorityClassName`` resolves to,
:mod:`.priority`). Any other kind is an error naming the document, kind and name and why
(:data:`.kinds.UNSUPPORTED`); nothing is dropped silently.

**Fields read** (each checked; an error names the document, object and field path):

- ``metadata``: ``name`` (or ``generateName``: the first free ``prefix1``, ``prefix2``, ...),
  ``namespace`` (default ``default``), ``labels`` (all carried to the workload, values must be
  strings), ``annotations`` (values must be strings);
- labels ``kueue.x-k8s.io/queue-name`` (a LocalQueue in the object's namespace: the queue is
  ``namespace/name``) or ``fleetshare.io/team`` (a team or queue, as a scenario's ``team:``),
  not both; ``kueue.x-k8s.io/priority-class`` (a WorkloadPriorityClass: the label names the
  class) or its synonym ``fleetshare.io/priority-class``, else the pod priority class: a
  Kubeflow job's ``runPolicy.schedulingPolicy.priorityClass``, else the first pod template's
  ``priorityClassName`` (Kueue's order; :attr:`ManifestWorkload.priority_source` says which);
- annotations ``fleetshare.io/duration`` (run time) and ``fleetshare.io/submit-at`` (offset
  from the start), seconds (``"5400"``) or Go durations (``"1h30m"``); another
  ``fleetshare.io/`` annotation is an error (a misspelling must not pass unseen), and so are
  the queue-name and priority-class keys given as annotations (Kueue reads them as labels);
- the kinds' counts (each kind's module says which fields): Job ``parallelism``,
  ``completions`` and the annotation ``kueue.x-k8s.io/job-min-parallelism`` (partial
  admission: the pod set's ``min_count``, greater than 0 and less than its pods); the
  Kubeflow jobs' replica specs' ``replicas``; JobSet
  ``replicatedJobs[].name``, ``replicas``; Ray ``headGroupSpec``,
  ``workerGroupSpecs[].groupName``, ``replicas``, ``minReplicas``, ``maxReplicas``,
  ``numOfHosts``, ``suspend`` (true is refused); RayJob ``rayClusterSpec``,
  ``submissionMode``, ``submitterPodTemplate``; RayService ``rayClusterConfig``; AppWrapper
  ``components[].podSets[].path``, ``replicas`` and ``template``; SparkApplication ``type``,
  ``sparkConf``, ``memoryOverheadFactor``, ``nodeSelector``, ``dynamicAllocation.enabled``
  (true is refused) and the driver's and executor's sizing fields, ``instances``;
  Deployment, StatefulSet ``replicas``, ``template``; LeaderWorkerSet ``replicas``,
  ``startupPolicy``, ``leaderWorkerTemplate`` ``size``, ``leaderTemplate``,
  ``workerTemplate``; CronJob ``jobTemplate``;
- pod templates (:mod:`.pods`): ``containers[]`` and ``initContainers[]`` ``resources``
  (``requests``, ``limits``), init containers' ``restartPolicy`` (``Always``: a sidecar),
  ``overhead``, pod-level ``resources``, ``nodeSelector``, ``tolerations`` (``key``,
  ``operator``, ``value``, ``effect``, ``tolerationSeconds`` checked only), required node
  affinity (``nodeSelectorTerms[].matchExpressions``; ``matchFields`` is refused),
  ``priorityClassName``; a template's Kueue topology annotations
  ``kueue.x-k8s.io/podset-required-topology`` / ``podset-preferred-topology`` (the node label
  all the pod set's pods must / should share: ``PodSet.required_topology`` /
  ``preferred_topology``).

**Noted** (the run's ``manifest_notes``: present, relevant to scheduling, not modelled):
Kueue labels and annotations other than the above (``kueue.x-k8s.io/job-min-parallelism``
on a kind other than a Job; ``podset-slice-*`` topology requests; ...), in the object's or a
pod template's metadata, with the reason their rule in :mod:`.kueue_keys` gives
(docs/fields.md lists them; those Kueue sets itself, such as ``job-uid``, pass in silence);
``activeDeadlineSeconds`` (Job,
JobSet's jobs, Kubeflow ``runPolicy``, RayJob); Kubeflow ``elasticPolicy`` and
``runPolicy.schedulingPolicy`` (but its ``priorityClass``); Ray ``enableInTreeAutoscaling``;
a Deployment's pods being queued one by one; a CronJob's schedule (one run is read); pod
``topologySpreadConstraints``, ``resourceClaims`` and containers' ``resources.claims`` (DRA),
``nodeName``, ``podAffinity`` / ``podAntiAffinity``, preferred node affinity,
``runtimeClassName`` without ``overhead``.

**Recognised and ignored as irrelevant to admission** (no note): ``status``; metadata other
than the above (``uid``, ``resourceVersion``, ``ownerReferences``, ``finalizers``, ...);
Job ``suspend`` (Kueue sets it), ``ttlSecondsAfterFinished``, ``backoffLimit``,
``backoffLimitPerIndex``, ``maxFailedIndexes``, ``podFailurePolicy``, ``successPolicy``,
``completionMode``, ``selector``, ``manualSelector``, ``podReplacementPolicy``,
``managedBy``; PyTorchJob replicas' ``restartPolicy``, ``runPolicy`` ``suspend``,
``cleanPodPolicy``, ``ttlSecondsAfterFinished``, ``backoffLimit``, and ``nprocPerNode``;
JobSet ``network``, ``successPolicy``, ``failurePolicy``, ``startupPolicy``, ``suspend``,
``ttlSecondsAfterFinished``, ``coordinator``, ``managedBy`` and replicated jobs' ``dependsOn``
(Kueue admits the whole JobSet at once); Ray ``rayVersion``, ``rayStartParams``,
``serviceType``, ``headService``, ``autoscalerOptions``, ``scaleStrategy``,
``idleTimeoutSeconds``; RayJob ``entrypoint``, ``runtimeEnvYAML``, ``jobId``,
``shutdownAfterJobFinishes``, ``ttlSecondsAfterFinished``, ``suspend``; pod ``restartPolicy``,
``volumes``, ``serviceAccountName``, ``securityContext``, ``dnsPolicy``, ``hostname``,
``subdomain``, ``schedulingGates`` (Kueue's own gate), ``preemptionPolicy`` (Kueue's
preemption does not read it), ``terminationGracePeriodSeconds``; containers' ``image``,
``command``, ``args``, ``env``, ``ports``, ``volumeMounts``, probes, ``lifecycle``,
``securityContext``. Other fields are not looked at: Kubernetes objects carry many.

**Defaults** (:class:`Defaults`, per document): the queue of an object without a queue label
(else ``queue`` is None: Kueue leaves such objects alone, and the scenario loader refuses
them), its duration (else None: it runs until the scenario ends) and its submit time (else 0).
"""

from fleetshare.manifests.durations import parse_duration
from fleetshare.manifests.kinds import KINDS, UNSUPPORTED
from fleetshare.manifests.kinds.base import QUEUE_LABEL, TEAM_LABEL
from fleetshare.manifests.parse import (
    DURATION_ANNOTATION,
    PRIORITY_LABEL,
    SUBMIT_ANNOTATION,
    Defaults,
    Document,
    ManifestWorkload,
    PrioritySource,
    documents,
    parse_manifest,
    parse_manifests,
    parse_text,
    pod_priority_classes,
)
from fleetshare.manifests.pods import effective_requests
from fleetshare.manifests.priority import PodPriorityClass, pod_priority_class, resolve_priority
from fleetshare.manifests.values import ManifestError

__all__ = [
    "DURATION_ANNOTATION",
    "KINDS",
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "SUBMIT_ANNOTATION",
    "TEAM_LABEL",
    "UNSUPPORTED",
    "Defaults",
    "Document",
    "ManifestError",
    "ManifestWorkload",
    "PodPriorityClass",
    "PrioritySource",
    "documents",
    "effective_requests",
    "parse_duration",
    "parse_manifest",
    "parse_manifests",
    "parse_text",
    "pod_priority_class",
    "pod_priority_classes",
    "resolve_priority",
]
