"""The server under test, seen from outside the load: the preflight check and the samplers of its `/metrics`."""
