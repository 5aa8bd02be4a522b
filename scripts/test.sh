#!/usr/bin/env bash
# The README's test command: install into a fresh venv, lint, type-check, run every test tier.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
# What the suite needs that lives outside the project's venv builds in the background from the start, beside the
# install and the tests that need neither: real vLLM for CPU for the e2e tier (its cached venv + model: ~2.5 min
# the first time, mostly downloads; a second later), and LiteLLM's proxy for the gateway tier (~1.5 min the first
# time). Each writes $setups/NAME.log, then NAME.rc; scripts/run_tests.py starts their tests once NAME.rc is
# there. VLLM_LOCUST_SKIP_E2E=1 skips vLLM's setup and the tier. Where a setup fails (no x86-64, no Python
# 3.11-3.14, pip), the other tiers still run and its tests are skipped with the setup's reason (one line in
# pytest's summary); VLLM_LOCUST_REQUIRE_E2E=1 makes the e2e tier's a failure.
setups="$(mktemp -d)"
trap 'rm -rf "$setups"' EXIT
in_background() { # NAME CMD...: run CMD, its output in $setups/NAME.log, its exit status then in $setups/NAME.rc
  local name="$1"; shift
  ( if "$@" >"$setups/$name.log" 2>&1; then rc=0; else rc=$?; fi
    echo "$rc" >"$setups/$name.rc.tmp" && mv "$setups/$name.rc.tmp" "$setups/$name.rc" ) &
}
case "${VLLM_LOCUST_SKIP_E2E:-}" in 1|true|yes) ;; *) in_background vllm bash tests/e2e/setup_vllm.sh ;; esac
in_background litellm bash tests/integration/gateways/setup_litellm.sh
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q -e '.[test]'
# the report tests render HTML in headless Chromium and PDFs with poppler; without them they skip
if ! command -v chromium >/dev/null || ! command -v pdftoppm >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get install -y -q chromium poppler-utils >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium poppler-utils >/dev/null 2>&1; }) ||
      echo "test.sh: could not install chromium/poppler-utils; browser and PDF checks will be skipped" >&2
  fi
fi
# the image tier (tests/integration/deploy) builds docker/Dockerfile with podman on a debootstrap'd Debian base
# and runs the rendered Jobs' pods; kubectl (client only) renders the kustomizations. Without them it skips;
# VLLM_LOCUST_SKIP_IMAGE=1 skips it on purpose.
if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get install -y -q podman debootstrap >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q podman debootstrap >/dev/null 2>&1; }) ||
      echo "test.sh: could not install podman/debootstrap; the image tier will be skipped" >&2
  fi
fi
# the gateway tests (tests/integration/gateways) start nginx and HAProxy in front of the simulator; without them
# they skip, loudly
if ! command -v nginx >/dev/null || ! command -v haproxy >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get install -y -q nginx haproxy >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q nginx haproxy >/dev/null 2>&1; }) ||
      echo "test.sh: could not install nginx/haproxy; the gateway tests will be skipped" >&2
  fi
fi
if ! command -v kubectl >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -q kubectl >/dev/null 2>&1 ||
    echo "test.sh: no kubectl package in this machine's apt sources; manifest rendering tests will be skipped" >&2
fi
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check . # the formatter's output depends on its version: pyproject pins it
# mypy runs beside the tests (it waits on nothing they need); its verdict is read at the end
mypy_log="$(mktemp)"
"$VENV/bin/mypy" vllm_users orchestration vllm_sim >"$mypy_log" 2>&1 &
mypy_pid=$!
wait_setups() { # for a plain pytest: every setup's end, and the e2e tier's reason to skip where vLLM's failed
  local name rc why
  for name in vllm litellm; do
    [ -e "$setups/$name.log" ] || continue
    while [ ! -e "$setups/$name.rc" ]; do sleep 1; done
    rc="$(cat "$setups/$name.rc")"
    [ "$rc" = 0 ] && continue
    why="$(grep -v '^\[setup_' "$setups/$name.log" | grep -v '^[[:space:]]*$' | tail -n 1)"
    echo "test.sh: setup $name exited $rc: ${why:-no message}; its tests will be skipped" >&2
    [ "$name" = vllm ] && export VLLM_LOCUST_E2E_UNAVAILABLE="tests/e2e/setup_vllm.sh exited $rc: ${why:-no message}"
  done
  return 0
}
# Every tier at once: scripts/run_tests.py keeps several pytest processes busy (most tests wait on servers
# and processes they start) and prints one summary with the slowest tests. With arguments, this is one
# plain pytest over them instead (`bash scripts/test.sh tests/unit -k stream`).
if [ "$#" -gt 0 ]; then
  wait_setups # one plain pytest: it may name e2e tests, so the setups end first
  if "$VENV/bin/python" -m pytest -q -p no:cacheprovider --durations=20 "$@"; then rc=0; else rc=$?; fi
else
  if "$VENV/bin/python" scripts/run_tests.py --setups "$setups"; then rc=0; else rc=$?; fi
fi
if wait "$mypy_pid"; then mypy_rc=0; else mypy_rc=$?; fi
cat "$mypy_log"; rm -f "$mypy_log"
[ "$mypy_rc" = 0 ] || { echo "test.sh: mypy failed" >&2; exit "$mypy_rc"; }
exit "$rc"
