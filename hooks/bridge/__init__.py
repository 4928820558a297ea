"""The slurm-bridge hooks: admission, pod and node decorators."""
