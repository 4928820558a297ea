"""The operator loop: discovery of clusters, the per-cluster pass, its pure plan and helpers."""
