"""`vllm-locust sweep-server --serve-cmd "vllm serve …" --param NAME=V1,V2 [--param …] --host URL [run options]`:
the command line; starting, checking and stopping the server per point is orchestration.capacity.serve_sweep."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from orchestration.capacity.serve_sweep import parse_param, run_server_sweep
from orchestration.commands import reported
from orchestration.settings import config as C
from vllm_users import errors
from vllm_users.client import tls
from vllm_users.options import RUN

__all__ = ["PROG", "main"]

PROG = "vllm-locust sweep-server"


def _parser() -> C.OneLineParser:
    p = C.OneLineParser(
        prog=PROG, description="Start the server once per parameter point, run the same load, one report"
    )
    p.add_argument(
        "--serve-cmd", required=True, help='The server command, e.g. "vllm serve MODEL --port 8000"'
    )
    p.add_argument(
        "--param",
        action="append",
        required=True,
        type=parse_param,
        metavar="NAME=V1,V2",
        help="A serve-command flag to sweep (--NAME V), or env:NAME=V1,V2 for an environment variable",
    )
    p.add_argument(
        "--health-timeout", type=C.pos_float, default=600.0, help="Seconds a start may take (default 600)"
    )
    p.add_argument("--stop-grace", type=C.pos_float, default=20.0, help="Seconds between SIGTERM and SIGKILL")
    return p


@reported(PROG)
def main(argv: Sequence[str]) -> int:
    """`vllm-locust sweep-server`: its own flags, then every `vllm-locust run` flag (--host required)."""
    own, rest = _parser().parse_known_args(list(argv))
    # the run machinery, once the own flags are good (`--help` stays quick)
    from orchestration.commands.run import new_run_parser, run

    try:
        a = C.parse_options(new_run_parser(PROG), rest, RUN)
        if not a.server.host:
            raise errors.UsageError(
                "--host: the URL where the started server listens, e.g. http://127.0.0.1:8000"
            )
        if a.capacity.sweep or a.capacity.find_max_rate:
            raise errors.UsageError(
                "sweep-server runs one load per point: leave out --sweep and --find-max-rate"
            )
        tls.configure(tls.TLSConfig.of(a.server))  # the health checks' TLS (each point's run sets it again)
        return run_server_sweep(own, a, run)
    except (
        C.UsageError
    ) as e:  # orchestration.settings.config's own class (the option checks), while it is not errors'
        raise errors.UsageError(str(e)) from None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
