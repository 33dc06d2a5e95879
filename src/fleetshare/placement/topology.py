"""Topology domains: which nodes a pod set asking to stay together may share.

A pod set may require (or prefer) a *topology level*, a node label such as
``kubernetes.io/hostname``, a network block ``topology.k8s.aws/network-node-layer-N`` or
``topology.kubernetes.io/zone`` (Kueue's topology-aware scheduling). Its pods must then all run
on nodes of one *domain*: nodes with the same value of that label. The rule lives here, once;
governance placement (``fit.py``), the room counts of the autoscaler and disruption
(``first_fit.py``) and the provisioner all use it.

- Levels, tightest first: hostname, network-node-layer-3, -2, -1 (AWS numbers its network
  layers from the top, so layer 3 is nearest the instance), zone. A level outside that list
  has only the hostname below it.
- A domain is keyed by the node's values of its level *and every wider known level*, so a
  host or block domain never reaches across two zones even where label values repeat.
- Every node has a hostname (its ``kubernetes.io/hostname`` label, else its name). A node
  without the label of a wider level is a domain of its own at that level: a pod set all on
  one node is in one domain of every level, whatever the node is labelled with.
- Within the required level, the tightest domain that holds the pod set wins: one node, else
  one block, ..., else one domain of the required level; among domains of one level the one
  with least room (best fit), ties to the first in node order. A *preferred* level falls back
  to wider levels and then to no constraint; a *required* one does not.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetshare.model.node import HOSTNAME_LABEL, ZONE_LABEL

NETWORK_LAYER_LABEL = "topology.k8s.aws/network-node-layer-{}"
LEVELS: tuple[str, ...] = (
    HOSTNAME_LABEL,
    NETWORK_LAYER_LABEL.format(3),
    NETWORK_LAYER_LABEL.format(2),
    NETWORK_LAYER_LABEL.format(1),
    ZONE_LABEL,
)
"""Known topology levels, tightest first."""

Domain = tuple[str, ...]


def levels_up_to(level: str) -> tuple[str, ...]:
    """The levels tried for a pod set constrained to ``level``: tightest first, ending with it."""
    if level in LEVELS:
        return LEVELS[: LEVELS.index(level) + 1]
    return (HOSTNAME_LABEL, level) if level != HOSTNAME_LABEL else (HOSTNAME_LABEL,)


def _wider(level: str) -> tuple[str, ...]:
    return LEVELS[LEVELS.index(level) + 1 :] if level in LEVELS else ()


def domain_of(labels: Mapping[str, str], level: str, name: str = "") -> Domain:
    """The domain of a node at ``level`` (``name``: its hostname when its labels lack one)."""
    host = labels.get(HOSTNAME_LABEL, name)
    value = host if level == HOSTNAME_LABEL else labels.get(level)
    if value is None:  # a domain of its own (see the module docstring)
        return ("host", host)
    return (level, value, *(labels.get(w, "") for w in _wider(level)))


def constraint(required: str | None, preferred: str | None) -> tuple[str | None, bool]:
    """The level a pod set asks for and whether it is required (a required level wins)."""
    if required is not None:
        return required, True
    return preferred, False


def describe_level(level: str) -> str:
    """``host`` / ``zone`` / the label, for messages."""
    if level == HOSTNAME_LABEL:
        return "host"
    if level == ZONE_LABEL:
        return "zone"
    return f"{level} domain"
