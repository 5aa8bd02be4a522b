"""Run a rendered Job's pod the way a kubelet would, without a cluster: one network namespace per pod, each
container in its own mount and PID namespace on an overlay of the image's root filesystem, chrooted, as the
securityContext's user, read-only when readOnlyRootFilesystem says so, volumes bind-mounted, /etc/hosts
mapping Service names to pod IPs. Needs root, iproute2, unshare and chroot.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def sh(*cmd: str) -> None:
    """Run a setup command; raise with its stderr when it fails."""
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip()}")


@dataclass
class Network:
    """A bridge and one namespace per host on a private /24 (addresses only this test uses)."""

    tag: str
    subnet: str
    hosts: dict[str, str] = field(default_factory=dict)  # name -> IP
    _next: int = 2

    @property
    def bridge(self) -> str:
        return f"vlk{self.tag}"

    def netns(self, name: str) -> str:
        """The namespace of host `name`."""
        return f"vlk{self.tag}{name}"[:15]

    def up(self) -> None:
        """Create the bridge."""
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "link", "set", self.bridge, "up")

    def add(self, name: str) -> str:
        """A namespace for host `name`, wired to the bridge; returns its IP."""
        ip = f"{self.subnet}.{self._next}"
        self._next += 1
        ns, a, b = self.netns(name), f"vka{self.tag}{self._next}"[:15], f"vkb{self.tag}{self._next}"[:15]
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        sh("ip", "link", "set", a, "master", self.bridge)
        sh("ip", "link", "set", a, "up")
        sh("ip", "link", "set", b, "netns", ns)
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ip}/24", "dev", b)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", b, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        self.hosts[name] = ip
        return ip

    def down(self) -> None:
        """Kill what still runs in the namespaces, delete them and the bridge."""
        for name in self.hosts:
            ns = self.netns(name)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args ($$ escapes)."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        text,
    )


def container_env(c: dict, image_env: list[str], configmaps: dict, secrets: dict) -> dict[str, str]:
    """The image's Env, then the container's env (value, configMapKeyRef, secretKeyRef) like the kubelet."""
    env = dict(e.split("=", 1) for e in image_env)
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = _expand(str(e["value"]), env)
            continue
        src = e["valueFrom"]
        ref, store = (
            (src["secretKeyRef"], secrets) if "secretKeyRef" in src else (src["configMapKeyRef"], configmaps)
        )
        value = store.get(ref["name"], {}).get(ref["key"])
        if value is None and not ref.get("optional"):
            raise KeyError(f"env {e['name']}: {ref['name']}/{ref['key']} does not exist")
        if value is not None:
            env[e["name"]] = value
    return env


def container_argv(c: dict, image: dict, env: dict[str, str]) -> list[str]:
    """command/args over the image's Entrypoint/Cmd, as Kubernetes combines them."""
    command = c.get("command") or image.get("Entrypoint") or []
    args = c["args"] if "args" in c else ([] if c.get("command") else image.get("Cmd") or [])
    return [_expand(x, env) for x in [*command, *args]]


@dataclass
class Pod:
    """One pod of a Job: its spec, its namespace, its directory (volumes, per-container overlays, logs)."""

    name: str
    spec: dict
    netns: str
    ip: str
    dir: Path
    image_root: str
    image: dict
    etc_hosts: str
    configmaps: dict[str, dict[str, str]]
    secrets: dict[str, dict[str, str]]
    volumes: dict[str, Path] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    logs: dict[str, Path] = field(default_factory=dict)  # container name -> its output, in start order

    def prepare(self) -> None:
        """Volumes (configMap files, emptyDir and PVC directories), /etc/hosts, resolv.conf."""
        self.dir.mkdir(parents=True)
        for v in self.spec.get("volumes", []):
            path = self.dir / "volumes" / v["name"]
            path.mkdir(parents=True)
            if "configMap" in v:
                for key, text in self.configmaps[v["configMap"]["name"]].items():
                    (path / key).write_text(text)
                path.chmod(0o755)
            else:  # emptyDir / persistentVolumeClaim: writable by the pod's user, as the kubelet makes them
                path.chmod(0o777)
            self.volumes[v["name"]] = path
        (self.dir / "hosts").write_text(f"127.0.0.1 localhost\n{self.ip} {self.name}\n{self.etc_hosts}")
        (self.dir / "resolv.conf").write_text("search vllm-locust.svc.cluster.local svc.cluster.local\n")

    def script(self, c: dict, n: int) -> tuple[str, dict[str, str]]:
        """The shell steps that build container `c`'s root and exec it as its user; and its environment."""
        sec = {**self.spec.get("securityContext", {}), **c.get("securityContext", {})}
        uid, gid = sec.get("runAsUser", 0), sec.get("runAsGroup", 0)
        if sec.get("runAsNonRoot") and uid == 0:
            raise ValueError(f"{c['name']}: runAsNonRoot with user 0: the kubelet would refuse to start it")
        groups = f"--groups={sec['fsGroup']}" if "fsGroup" in sec else ""
        env = container_env(c, self.image["Env"], self.configmaps, self.secrets)
        argv = container_argv(c, self.image, env)
        workdir = c.get("workingDir") or self.image.get("WorkingDir") or "/"
        base = self.dir / f"c{n}-{c['name']}"
        root, q = base / "root", shlex.quote
        steps = [
            f"mkdir -p {q(str(root))} {q(str(base / 'upper'))} {q(str(base / 'work'))}",
            f"mount -t overlay overlay -o lowerdir={self.image_root},upperdir={base / 'upper'},"
            f"workdir={base / 'work'} {q(str(root))}",
        ]
        mounts = [
            (str(self.dir / "hosts"), "/etc/hosts", True),
            (str(self.dir / "resolv.conf"), "/etc/resolv.conf", True),
        ]
        mounts += [
            (str(self.volumes[m["name"]]), m["mountPath"], bool(m.get("readOnly")))
            for m in c.get("volumeMounts", [])
        ]
        for _, target, _ in mounts:  # mount points, made in the overlay's upper layer as a runtime does
            t = q(str(root) + target)
            steps.append(f"mkdir -p {t}" if not target.startswith("/etc/") else f"touch {t}")
        if sec.get("readOnlyRootFilesystem"):
            steps.append(f"mount -o remount,ro {q(str(root))}")
        steps.append(f"hostname {q(self.name)}")
        steps += [f"mount -t proc proc {q(str(root))}/proc", f"mount --rbind /dev {q(str(root))}/dev"]
        for src, target, ro in mounts:
            steps.append(f"mount --bind {q(src)} {q(str(root) + target)}")
            if ro:
                steps.append(f"mount -o remount,bind,ro {q(str(root) + target)}")
        env_args = " ".join(q(f"{k}={v}") for k, v in env.items())
        steps.append(
            f"exec chroot --userspec={uid}:{gid} {groups} {q(str(root))} /usr/bin/env -i -C {q(workdir)} "
            f"{env_args} {' '.join(q(x) for x in argv)}"
        )
        return "\n".join(steps), env

    def start(self, c: dict, n: int) -> subprocess.Popen:
        """Start container `c` (its own mount and PID namespaces, in the pod's network namespace)."""
        script, _ = self.script(c, n)
        self.logs[c["name"]] = self.dir / f"{c['name']}.log"
        out = open(self.logs[c["name"]], "a")
        cmd = [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--mount",
            "--uts",
            "--pid",
            "--fork",
            "--kill-child",
            "--propagation",
            "private",
            "sh",
            "-ec",
            script,
        ]
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self.proc

    def run(self, timeout: float) -> int:
        """initContainers one by one (each must exit 0), then the (single) container; its exit code."""
        self.prepare()
        for n, c in enumerate(self.spec.get("initContainers", [])):
            rc = self.start(c, n).wait(timeout=timeout)
            if rc != 0:
                return rc
        containers = self.spec["containers"]
        assert len(containers) == 1, "one container per pod in these Jobs"
        return self.start(containers[0], 99).wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the container's session (its PID namespace dies with it)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)

    def output(self, container: str = "") -> str:
        """What one container printed, or all of the pod's containers in start order."""
        paths = [self.logs[container]] if container else list(self.logs.values())
        return "".join(p.read_text(errors="replace") for p in paths)


def pod_spec(job: dict) -> dict[str, Any]:
    """A Job's pod template spec."""
    return job["spec"]["template"]["spec"]
