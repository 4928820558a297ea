"""The Slurm REST client: HTTP and conditional listings (client), typed answers (types), errors."""
