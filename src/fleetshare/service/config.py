"""The service's config: a scenario file without workloads (cluster, policy or kueue or
hyperpod, node_pools, cloud, autoscaler, pdbs, do_not_disrupt), or the bundled default."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fleetshare.inputs import InputError, parse_yaml
from fleetshare.scenario.loader import Scenario, ScenarioError, load_scenario, load_scenario_data

DEFAULT_CONFIG = "default.yaml"


def load_config(path: Path | None = None) -> Scenario:
    """The config at ``path``, or the bundled default (four ml.g5.8xlarge, two teams);
    checked by :func:`check_config`."""
    if path is not None:
        return check_config(load_scenario(path))
    text = (files("fleetshare.service") / DEFAULT_CONFIG).read_text(encoding="utf-8")
    try:
        data = parse_yaml(text, "default config")
    except InputError as exc:  # pragma: no cover - the bundled file is tested
        raise ScenarioError(str(exc)) from None
    return check_config(load_scenario_data(data, Path("."), "default config"))


def check_config(config: Scenario) -> Scenario:
    """``config`` if it holds no scenario features (workloads, cluster events, policy
    changes: work comes through the API), else ScenarioError."""
    if config.workloads or config.events or config.policy_changes:
        raise ScenarioError(
            "a service config holds the cluster, policy and node pools only: submit "
            "workloads through the API (workloads, cluster.events and policy_changes "
            "are scenario features)"
        )
    return config
