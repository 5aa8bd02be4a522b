"""How workers and the master talk: the typed messages, the worker's batching and schedule, the master's merge."""
