"""The bridge loop: placeholder jobs, binding, node taints/drains/registration."""
