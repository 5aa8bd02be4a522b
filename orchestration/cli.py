"""`vllm-locust` command line: run, sim, report, worker, k8s."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from orchestration import config as C
from vllm_users import exit_codes
from vllm_users.options import RUN


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vllm-locust` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "sim":
        from vllm_sim import main as sim_main

        return int(sim_main(argv[1:]) or 0)
    if argv and argv[0] == "report":
        try:
            from orchestration.report.cli import main as report_main
        except ImportError:
            print("vllm-locust: error: the report command is not available in this build", file=sys.stderr)
            return exit_codes.USAGE
        return int(report_main(argv[1:]) or 0)
    if argv and argv[0] == "sweep-server":
        from orchestration.capacity.serve_sweep import main as sweep_server_main

        return sweep_server_main(argv[1:])
    if argv and argv[0] == "k8s":
        from orchestration.k8s.cli import main as k8s_main

        return k8s_main(argv[1:])
    if argv and argv[0] == "worker":
        from orchestration.worker_cmd import main as worker_main

        return worker_main(argv[1:])
    parser = C.OneLineParser(prog="vllm-locust", description="Distributed load testing for vLLM, built on Locust")
    sub = parser.add_subparsers(dest="command", metavar="{run,sim,report,worker,sweep-server,k8s}")
    from orchestration.run_cmd import add_run_parser, run

    run_parser = add_run_parser(sub)
    run_parser.__class__ = C.OneLineParser
    sub.add_parser("sim", help="Run the embedded vLLM-compatible simulator (see `vllm-locust sim --help`)")
    sub.add_parser("report", help="Build reports from run directories (see `vllm-locust report --help`)")
    sub.add_parser("worker", help="Join a remote master as a worker (see `vllm-locust worker --help`)")
    sub.add_parser("sweep-server", help="Restart the server per parameter point, same load each (see --help)")
    sub.add_parser("k8s", help="Kubernetes manifests for a run (see `vllm-locust k8s render --help`)")
    if not argv:
        parser.print_help()
        return exit_codes.USAGE
    try:
        if argv[0] != "run":
            parser.parse_args(argv)  # --help, or a one-line error naming the command
            parser.print_help()
            return exit_codes.USAGE
        return run(C.parse_options(run_parser, argv[1:], RUN))
    except C.UsageError as e:
        print(f"vllm-locust: error: {e}", file=sys.stderr)
        return exit_codes.USAGE
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
