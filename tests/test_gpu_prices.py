"""Pricing GPU nodes that name no instance type by their GPU model and size
(model.catalog.price_gpu_node; simulate.variants.node_price), on hand-built nodes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetshare.model.catalog import (
    GPU_MODEL_TO_CATALOG,
    GPU_PRODUCT_LABEL,
    gpu_family,
    load_catalog,
    price_gpu_node,
)
from fleetshare.model.node import Node
from fleetshare.model.quantity import MILLI
from fleetshare.model.resources import CPU, GPU, MEMORY
from fleetshare.simulate.variants import node_instance_type, node_price
from fleetshare.traces import load_trace

CATALOG = load_catalog()
MIB = 2**20


def gpu_node(name: str, model: str, gpus: int, vcpu: int, memory_gib: int) -> Node:
    return Node(
        name,
        {GPU: gpus * MILLI, CPU: vcpu * MILLI, MEMORY: memory_gib * 1024 * MIB * MILLI},
        labels={GPU_PRODUCT_LABEL: model},
    )


@pytest.mark.parametrize(
    ("model", "gpus", "vcpu", "gib", "priced_as", "usd"),
    [
        # exactly a real type
        ("T4", 8, 96, 384, "g4dn.metal", 7.824),
        ("V100M32", 8, 96, 768, "p3dn.24xlarge", 31.212),
        ("A100", 8, 96, 1152, "p4d.24xlarge", 21.957642),
        # smaller than the type of its GPU: that share of it
        ("V100M16", 1, 8, 32, "1/8 x p3dn.24xlarge", 31.212 / 8),
        ("P100", 2, 16, 120, "1/4 x p3dn.24xlarge", 31.212 / 4),  # P100 -> V100 (p3)
        ("T4", 1, 4, 16, "g4dn.xlarge", 0.526),
        ("A10", 1, 8, 32, "g5.2xlarge", 1.212),
        # more memory than any type of its GPU: its share of the closest
        ("T4", 2, 104, 512, "1.33 x g4dn.metal", 7.824 * 512 / 384),
        # an undisclosed model: the cheapest NVIDIA type that holds it
        ("G2", 8, 96, 384, "g4dn.metal", 7.824),
    ],
)
def test_nodes_are_priced_by_gpu_model_and_size(
    model: str, gpus: int, vcpu: int, gib: int, priced_as: str, usd: float
) -> None:
    name, price = node_price(gpu_node("n", model, gpus, vcpu, gib), CATALOG, {"gpu": "p5.48xlarge"})
    assert name == priced_as
    assert price == pytest.approx(usd, rel=1e-6)


def test_the_2gpu_t4_node_is_no_longer_a_p5() -> None:
    """The issue's case: a 2-GPU T4 node priced as a p5.48xlarge ($55/h)."""
    name, price = node_price(gpu_node("t4", "T4", 2, 104, 512), CATALOG, {"gpu": "p5.48xlarge"})
    assert "g4dn" in name and price < 11
    # a node naming its type keeps it; a node without a GPU label takes the default
    named = Node("x", {GPU: 8 * MILLI}, instance_type="p4d.24xlarge")
    assert node_price(named, CATALOG, {"gpu": "p5.48xlarge"}) == ("p4d.24xlarge", 21.957642)
    bare = Node("y", {GPU: 8 * MILLI})
    assert node_price(bare, CATALOG, {"gpu": "p4d.24xlarge"})[0] == "p4d.24xlarge"


def test_the_alibaba_cluster_is_priced_by_model() -> None:
    trace = load_trace("alibaba")
    names = {node_price(n, CATALOG, {"gpu": "unused"})[0] for n in trace.nodes}
    assert not any("p5" in n for n in names)
    total = sum(node_price(n, CATALOG, {"gpu": "unused"})[1] for n in trace.nodes)
    assert 10_000 < total < 14_000  # was 1,213 x $55.04 = $66,764 per hour
    assert node_instance_type(trace.nodes, CATALOG) == "g4dn.metal"  # the G2 nodes' type


def test_unknown_models_are_named() -> None:
    with pytest.raises(ValueError, match="GPU model 'Z9'"):
        price_gpu_node(CATALOG, "Z9", 1)
    with pytest.raises(ValueError, match="at least one GPU"):
        price_gpu_node(CATALOG, "T4", 0)


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from(sorted(GPU_MODEL_TO_CATALOG)),
    gpus=st.integers(1, 8),
    vcpu=st.integers(1, 256),
    memory_gib=st.integers(1, 2048),
)
def test_never_priced_above_a_type_with_more_of_every_resource(
    model: str, gpus: int, vcpu: int, memory_gib: int
) -> None:
    """Of the GPU it is priced as: a type with at least the node's GPUs, vCPUs and memory
    costs at least as much as the node (across GPU models the comparison is not made: AWS
    itself prices p3 V100s above g5 A10Gs that have more of every resource)."""
    price = price_gpu_node(CATALOG, model, gpus, vcpu, memory_gib * 1024)
    _, family = gpu_family(CATALOG, model)
    for t in family:
        if t.gpu_count >= gpus and t.vcpu >= vcpu and t.memory_mib >= memory_gib * 1024:
            assert price.price_per_hour <= (t.price_per_hour or 0.0) + 1e-9, t.name
    assert price.price_per_hour > 0
