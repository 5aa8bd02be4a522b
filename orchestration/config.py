"""The `vllm-locust run` / `worker` command lines, generated from the option table (vllm_users.options).

Precedence: command line > environment (VLLM_LOCUST_<OPTION>) > config file (--config, YAML/JSON) > preset
(--preset, orchestration.presets) > the table's default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from vllm_users.exit_codes import USAGE
from vllm_users.option_types import duration, fraction, nonneg_float, nonneg_int, pos_float, pos_int, rate  # noqa: F401
from vllm_users.options import API_KEY_ENV, ENV_SWITCHES, LOCUST, RUN, SPECS, coerce, env_name, flag, table


class UsageError(Exception):
    """Bad input: the message is one line naming the problem."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line and exits with the documented usage code."""

    def error(self, message: str) -> NoReturn:
        """Print `vllm-locust: error: <message>` and exit USAGE (the same line as the checks after parsing)."""
        sys.stderr.write(f"{self.prog.split()[0]}: error: {message}\n")
        sys.exit(USAGE)


class _Join(argparse.Action):
    """nargs='+' words kept as one text (--goodput ttft:500 tpot:50 -> 'ttft:500 tpot:50'), checked as one."""

    def __call__(self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any, opt: Any = None) -> None:
        try:
            setattr(ns, self.dest, coerce(self.dest, list(values)))
        except argparse.ArgumentTypeError as e:
            parser.error(f"argument {flag(self.dest)}: {e}")


def add_options(p: argparse.ArgumentParser, scope: str, choices: Mapping[str, Sequence[str]] | None = None,
                defaults: Mapping[str, Any] | None = None) -> None:  # fmt: skip
    """Add every option of `scope` (run or worker) to `p`, with the table's parser, default and help."""
    for name, spec, default in table(scope):
        default = (defaults or {}).get(name, default)
        if spec.repeat:
            default = None  # argparse appends to it: none until given
        names = [flag(name)] + ([spec.short] if spec.short else [])
        shown = "" if default in (None, "", False, ()) else f" (default: {default})"
        kw: dict[str, Any] = {"dest": name, "default": default, "help": spec.help.replace("%", "%%") + shown}
        if spec.parse is None:
            kw["action"] = "store_true"
        elif spec.many:
            kw.update(nargs="+", action=_Join)
        else:
            kw["type"] = spec.parse
            if spec.repeat:
                kw["action"] = "append"
        allowed = (choices or {}).get(name, spec.choices)
        if allowed is not None:
            kw["choices"] = list(allowed)
        if spec.metavar:
            kw["metavar"] = spec.metavar
        p.add_argument(*names, **kw)
        vars(p).setdefault("vllm_defaults", {})[name] = kw["default"]


def load_config(path: str) -> dict[str, Any]:
    """Read a YAML or JSON config file of option -> value; UsageError naming the file when unreadable."""
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as e:
        raise UsageError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        if path.endswith(".json"):
            doc = json.loads(text)
        else:
            import yaml

            doc = yaml.safe_load(text)
    except Exception as e:  # noqa: BLE001 - any parse error is the same user mistake
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"config file {path} is not valid YAML/JSON: {first}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise UsageError(f"config file {path} must hold a mapping of option: value")
    return {str(k).replace("-", "_"): v for k, v in doc.items()}


def apply_defaults(parser: argparse.ArgumentParser, argv: Sequence[str], environ: Mapping[str, str] | None = None) -> None:
    """Set the parser's defaults from --config and then the environment (the command line still wins); every
    value checked by the table's parser (UsageError with one line naming the option and where it came from)."""
    environ = os.environ if environ is None else environ
    parser.set_defaults(**vars(parser).get("vllm_defaults", {}))  # a parser used twice starts afresh
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    cfg_path = known.config or environ.get(env_name("config"))
    dests = {a.dest for a in parser._actions if a.dest not in ("help", "config")}
    values: dict[str, tuple[Any, str]] = {}
    if cfg_path:
        where = f"config file {cfg_path}"
        doc = load_config(cfg_path)
        unknown = [k for k in doc if k not in dests]
        if unknown:
            raise UsageError(f"{where}: unknown option {unknown[0]!r}")
        values = {k: (v, where) for k, v in doc.items()}
    for dest in dests:
        if dest in SPECS and env_name(dest) in environ:
            values[dest] = (environ[env_name(dest)], "the environment")
    for dest, (raw, where) in values.items():
        try:
            value = coerce(dest, raw) if dest in SPECS else raw
            choices = next((a.choices for a in parser._actions if a.dest == dest), None)
            if choices is not None and value not in choices:
                raise argparse.ArgumentTypeError(f"{raw!r} is not one of {', '.join(map(str, choices))}")
        except (argparse.ArgumentTypeError, ValueError) as e:
            raise UsageError(f"option {flag(dest)} from {where}: {e}") from None
        if dest in SPECS and SPECS[dest].repeat:
            value = list(value)  # argparse appends the command line's to it
        parser.set_defaults(**{dest: value})


def parse_options(parser: argparse.ArgumentParser, argv: Sequence[str], scope: str,
                  environ: Mapping[str, str] | None = None) -> argparse.Namespace:  # fmt: skip
    """The command's options from its command line, environment, config file and (run) preset."""
    apply_defaults(parser, argv, environ)
    a = parser.parse_args(list(argv))
    if scope == RUN and a.preset:
        from orchestration.presets import apply_preset

        apply_preset(a, list(argv))
    return a


def child_env(api_key: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a Locust process we start: no option variables (its options come on its command line
    or from its master, so a variable cannot undo a flag), the API key only under VLLM_LOCUST_API_KEY."""
    drop = {env_name(n) for n, _, _ in table()} | {env_name(s.locust_name) for _, s, _ in table() if s.locust_name}
    env = {k: v for k, v in os.environ.items() if k not in drop and k not in API_KEY_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    if api_key:
        env[API_KEY_ENV[0]] = api_key
    env.update(extra or {})
    return env


def reference_markdown() -> str:
    """docs/options.md: every option of the table with its flag, env name, default, scopes and help."""
    rows = [
        "# Options",
        "",
        "Generated from the option table (`vllm_users/options.py`) by `python -m orchestration.config > docs/options.md`;",
        "a test keeps it in step. Every option is also the environment variable `VLLM_LOCUST_<OPTION>` and the",
        "config-file key `option_name` (or `option-name`). Precedence: command line > environment > config file",
        "(`--config`) > preset (`--preset`) > default. Scopes: `run` / `worker` (`vllm-locust run` / `worker`;",
        "`vllm-locust k8s render` takes run's), `locust` (plain `locust -f`; `vllm-locust run` passes those it",
        "shares on to its master, which ships them to the workers). The same parser checks a value in every scope.",
        "",
        "| option | env | default | scopes | meaning |",
        "|---|---|---|---|---|",
    ]
    for name, spec, default in table():
        flags = flag(name) + (f", {spec.short}" if spec.short else "")
        if LOCUST in spec.scopes and spec.locust_name:
            flags += f" (locust: {flag(spec.locust_name)})"
        env = env_name(name) + (f", locust: {env_name(spec.locust_name)}" if spec.locust_name else "")
        shown = "" if default in (None, "", ()) else f"`{default}`"
        choices = " (" + " \\| ".join(spec.choices) + ")" if spec.choices else ""
        rows.append(f"| `{flags}` | `{env}` | {shown} | {', '.join(spec.scopes)} | {spec.help}{choices} |")
    rows += ["", "## Environment switches (not options)", "", "| variable | meaning |", "|---|---|"]
    rows += [f"| `{k}` | {v} |" for k, v in ENV_SWITCHES.items()]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())
