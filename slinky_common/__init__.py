"""What the hooks and slurm_sync share: names, Slurm state semantics, spec readers, a NodeSet's slurm.conf
identity, decoding and logging (docs/architecture.md §1). It imports neither half."""
