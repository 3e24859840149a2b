"""What the user writes: the spec schema, its YAML loading, and Slurm hostlists."""
