"""The `vllm-locust run` / `worker` command lines, generated from the option table (vllm_users.options).

Precedence: command line > environment (VLLM_LOCUST_<OPTION>) > config file (--config, YAML/JSON) > preset
(--preset, orchestration.settings.presets) > the table's default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from vllm_users.errors import UsageError as UsageError  # raised here; `config.UsageError` stays importable
from vllm_users.exit_codes import USAGE
from vllm_users.option_types import duration as duration  # these parsers are re-exported: `config.pos_float`
from vllm_users.option_types import fraction as fraction
from vllm_users.option_types import nonneg_float as nonneg_float
from vllm_users.option_types import nonneg_int as nonneg_int
from vllm_users.option_types import pos_float as pos_float
from vllm_users.option_types import pos_int as pos_int
from vllm_users.option_types import rate as rate
from vllm_users.options import (
    API_KEY_ENV,
    DEFAULTS,
    ENV_SWITCHES,
    GROUP_OF,
    LOCUST,
    SPECS,
    WORKER,
    Options,
    build,
    coerce,
    env_name,
    flag,
    table,
)


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line and exits with the documented usage code."""

    def error(self, message: str) -> NoReturn:
        """Print `vllm-locust: error: <message>` and exit USAGE (the same line as the checks after parsing)."""
        sys.stderr.write(f"{self.prog.split()[0]}: error: {message}\n")
        sys.exit(USAGE)


class _Join(argparse.Action):
    """nargs='+' words kept as one text (--goodput ttft:500 tpot:50 -> 'ttft:500 tpot:50'), checked as one."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any, opt: Any = None
    ) -> None:
        try:
            setattr(ns, self.dest, coerce(self.dest, list(values)))
        except argparse.ArgumentTypeError as e:
            parser.error(f"argument {flag(self.dest)}: {e}")


def add_options(
    p: argparse.ArgumentParser,
    scope: str,
    choices: Mapping[str, Sequence[str]] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """Add every option of `scope` (run or worker) to `p`, with the table's parser, default and help; --help
    shows them under their option group's name."""
    groups: dict[str, Any] = {}
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
        group = GROUP_OF[name]
        if group not in groups:
            groups[group] = p.add_argument_group(group)
        groups[group].add_argument(*names, **kw)
        vars(p).setdefault("vllm_defaults", {})[name] = kw["default"]


def load_config(path: str) -> dict[str, Any]:
    """Read a YAML or JSON config file of option -> value; UsageError naming the file when unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise UsageError(f"cannot read config file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:  # a binary file, or another encoding than YAML's and JSON's UTF-8
        raise UsageError(
            f"config file {path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})"
        ) from None
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
    out = {str(k).replace("-", "_"): v for k, v in doc.items()}
    return _classes_key(out, path)


def _classes_key(doc: dict[str, Any], path: str) -> dict[str, Any]:
    """A config's `classes:` list (mappings or --class texts; also `class:`) as the class_ option (one syntax)."""
    from vllm_users.workload.classes import from_config

    for key in ("classes", "class"):
        if key in doc:
            items = doc.pop(key)
            try:
                doc["class_"] = [from_config(x) for x in (items if isinstance(items, list) else [items])]
            except ValueError as e:
                raise UsageError(f"config file {path}: {e}") from None
    return doc


LAYERS = ("default", "preset", "file", "env", "cli")


def _checked(raw: Mapping[str, Any], names: set[str], where: str) -> dict[str, Any]:
    out = {}
    for name, value in raw.items():
        if name not in names:
            raise UsageError(f"{where}: unknown option {name!r}")
        try:
            out[name] = coerce(name, value)
        except (argparse.ArgumentTypeError, ValueError) as e:
            raise UsageError(f"option {flag(name)} from {where}: {e}") from None
    return out


def layers(
    parser: argparse.ArgumentParser, argv: Sequence[str], scope: str, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, dict[str, Any]], argparse.Namespace]:
    """Each layer's values (LAYERS order), checked, and the parser's own arguments that are not options (k8s
    render's --out, ...): what the command line, environment, config file and preset set."""
    environ = os.environ if environ is None else environ
    names = {name for name, _, _ in table(scope)}
    defaults: dict[str, Any] = {**{n: DEFAULTS[n] for n in names}, **vars(parser).get("vllm_defaults", {})}
    defaults.update({n: () for n in names if SPECS[n].repeat})
    actions = [x for x in parser._actions if x.dest in names]
    saved = [x.default for x in actions]
    for x in actions:
        x.default = argparse.SUPPRESS  # the namespace then holds only what the command line gives
    try:
        ns = parser.parse_args(list(argv))
    finally:
        for x, d in zip(actions, saved, strict=True):
            x.default = d
    cli = {k: v for k, v in vars(ns).items() if k in names}
    extras = argparse.Namespace(**{k: v for k, v in vars(ns).items() if k not in names})
    for name in cli:
        if SPECS[name].repeat:
            cli[name] = tuple(cli[name])
    env = _checked(
        {n: environ[env_name(n)] for n in names if env_name(n) in environ}, names, "the environment"
    )
    path = cli.get("config") or env.get("config")
    where = f"config file {path}"
    own_file = scope != WORKER  # a worker's --config is its master's file: it takes only the users from it
    file = _checked(load_config(path), names - {"config"}, where) if path and own_file else {}
    given = {**file, **env, **cli}
    preset: dict[str, Any] = {}
    if given.get("preset"):
        from orchestration.settings.presets import preset_layer

        preset = preset_layer(given["preset"], given)
    return {"default": defaults, "preset": preset, "file": file, "env": env, "cli": cli}, extras


def merge(by_layer: Mapping[str, Mapping[str, Any]]) -> Options:
    """The options: each value from the highest layer that sets it."""
    values: dict[str, Any] = {}
    for layer in LAYERS:
        values.update(by_layer.get(layer, {}))
    return build(**values)


def parse_all(
    parser: argparse.ArgumentParser, argv: Sequence[str], scope: str, environ: Mapping[str, str] | None = None
) -> tuple[Options, argparse.Namespace]:
    """The command's frozen options (command line > environment > config file > preset > default) and its
    other arguments."""
    by_layer, extras = layers(parser, argv, scope, environ)
    return merge(by_layer), extras


def parse_options(
    parser: argparse.ArgumentParser, argv: Sequence[str], scope: str, environ: Mapping[str, str] | None = None
) -> Options:
    """The command's frozen options from its command line, environment, config file and (run) preset."""
    return parse_all(parser, argv, scope, environ)[0]


def child_env(api_key: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a Locust process we start: no option variables (its options come on its command line
    or from its master, so a variable cannot undo a flag), the API key only under VLLM_LOCUST_API_KEY."""
    drop = {env_name(n) for n, _, _ in table()} | {
        env_name(s.locust_name) for _, s, _ in table() if s.locust_name
    }
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
        "Generated from the option table (`vllm_users/options.py`) by `python -m orchestration.settings.config > docs/options.md`;",
        "a test keeps it in step. Every option is also the environment variable `VLLM_LOCUST_<OPTION>` and the",
        "config-file key `option_name` (or `option-name`). Precedence: command line > environment > config file",
        "(`--config`) > preset (`--preset`) > default. Scopes: `run` / `worker` (`vllm-locust run` / `worker`;",
        "`vllm-locust k8s render` takes run's), `locust` (plain `locust -f`; `vllm-locust run` passes those it",
        "shares on to its master, which ships them to the workers). The same parser checks a value in every scope,",
        "and the same rules check the options together (each group's `check()`, `vllm_users/option_rules.py`).",
        "",
        "| option | env | default | scopes | meaning |",
        "|---|---|---|---|---|",
    ]
    for name, spec, default in table():
        flags = flag(name) + (f", {spec.short}" if spec.short else "")
        if LOCUST in spec.scopes and spec.locust_name:
            flags += f" (locust: {flag(spec.locust_name)})"
        env = env_name(name) + (f", locust: {env_name(spec.locust_name)}" if spec.locust_name else "")
        default = spec.text(default) if spec.text is not None else default  # a structured one: its text
        shown = "" if default in (None, "", ()) else f"`{default}`"
        choices = " (" + " \\| ".join(spec.choices) + ")" if spec.choices else ""
        rows.append(f"| `{flags}` | `{env}` | {shown} | {', '.join(spec.scopes)} | {spec.help}{choices} |")
    rows += ["", "## Environment switches (not options)", "", "| variable | meaning |", "|---|---|"]
    rows += [f"| `{k}` | {v} |" for k, v in ENV_SWITCHES.items()]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())
