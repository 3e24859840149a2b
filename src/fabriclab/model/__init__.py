"""The fabric and the cluster around it, built from a spec."""
