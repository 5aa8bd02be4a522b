"""Master/worker plumbing: Locust events, per-worker state, master-side collection."""
