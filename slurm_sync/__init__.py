"""slurm_sync: polls slurmrestd, writes Slurm's truth onto Kubernetes, carries out hook intents."""
