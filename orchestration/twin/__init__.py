"""A twin of the user's deployment, so capacity questions are answered without the GPU: a bounded probe of a real
server (`probe.py`, `phases.py`), the fit of the simulator's constants to it (`fit.py`), and the twin profile it
writes (`profile.py`; read by vllm_sim.twin). `vllm-locust calibrate` (orchestration/commands/calibrate.py) runs
them; docs/twin.md says how."""
