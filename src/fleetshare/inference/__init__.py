"""Inference services: replicas that follow traffic (a KEDA/HPA-style scaler), the traffic they
follow, the options that keep capacity ahead of it, and the SLA metrics of a run."""
