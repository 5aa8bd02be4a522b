"""What a run shows while it runs: the web UI's LLM tab, its live figures, and the Prometheus export."""
