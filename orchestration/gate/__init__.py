"""`vllm-locust gate`: is a candidate run worse than a baseline, beyond the noise? (orchestration/commands/gate.py is
the command line.)

samples (each side's per-request samples: run, repeats or baseline file) <- statistics (each metric from the
samples, and its block bootstrap) <- verdict (intervals, verdicts, the GateReport) <- output (console, JUnit,
Markdown, JSON); rules parses --max-regression. docs/ci.md shows it in GitHub Actions and GitLab CI.
"""
