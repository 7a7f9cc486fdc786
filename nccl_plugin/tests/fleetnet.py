"""Shared by the plugin's pytest tests and benchmarks/failover_resume.py: build the plugin, run
the harness, and a private two-namespace testbed (two hosts joined by two veth pairs, eth0 and
eth1 on each side) where links can be taken down. Needs root for the testbed; nothing here
passes a string through a shell."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from fleetctl.failover.harness import finish, progress_bytes, results  # noqa: F401 (re-exported)

PLUGIN_DIR = Path(__file__).resolve().parents[1]
LIB = PLUGIN_DIR / "build" / "libnccl-net-fleet.so"
HARNESS = PLUGIN_DIR / "build" / "fleet_harness"
HOSTILE = PLUGIN_DIR / "build" / "fleet_hostile"


def build() -> None:
    subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR)], check=True, capture_output=True, text=True)


def can_make_netns() -> bool:
    return os.geteuid() == 0 and Path("/usr/sbin/ip").exists() or Path("/sbin/ip").exists()


class Testbed:
    """Namespaces <tag>a and <tag>b; link k is ethK(a) 10.(77+k).<n>.1/30 <-> ethK(b) .2."""

    def __init__(self, tag: str | None = None, links: int = 2, subnet: int = 0):
        self.tag = tag or f"fl{os.getpid() % 100000}"
        self.ns = {"a": f"{self.tag}a", "b": f"{self.tag}b"}
        self.links = links
        self.addr = {side: [f"10.{77 + k}.{subnet}.{1 if side == 'a' else 2}" for k in range(links)]
                     for side in ("a", "b")}
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def __enter__(self) -> "Testbed":
        self.down_all()
        for side in ("a", "b"):
            self._ip("netns", "add", self.ns[side])
            self._ip("-n", self.ns[side], "link", "set", "lo", "up")
        for k in range(self.links):
            self._ip("link", "add", f"{self.tag}x{k}", "netns", self.ns["a"], "type", "veth",
                     "peer", "name", f"{self.tag}y{k}", "netns", self.ns["b"])
            for side, dev in (("a", f"{self.tag}x{k}"), ("b", f"{self.tag}y{k}")):
                self._ip("-n", self.ns[side], "link", "set", dev, "name", f"eth{k}")
                self._ip("-n", self.ns[side], "addr", "add", f"{self.addr[side][k]}/30", "dev", f"eth{k}")
                self._ip("-n", self.ns[side], "link", "set", f"eth{k}", "up")
        self.wait_oper(True)
        return self

    def oper_up(self, side: str, k: int) -> bool:
        out = subprocess.run(["ip", "-n", self.ns[side], "-j", "link", "show", f"eth{k}"],
                             capture_output=True, text=True).stdout
        try:
            return json.loads(out)[0].get("operstate") == "UP"
        except (ValueError, IndexError):
            return False

    def wait_oper(self, up: bool, timeout: float = 5.0) -> None:
        """The kernel reports carrier-up up to 1 s late (linkwatch): wait for every link."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(self.oper_up(s, k) == up for s in ("a", "b") for k in range(self.links)):
                return
            time.sleep(0.05)
        raise RuntimeError(f"links of {self.tag} not {'up' if up else 'down'} after {timeout} s")

    def down_all(self) -> None:
        for side in ("a", "b"):
            subprocess.run(["ip", "netns", "del", self.ns[side]], capture_output=True)

    def __exit__(self, *exc) -> None:
        self.down_all()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def set_link(self, side: str, k: int, up: bool) -> float:
        """Take ethK of one side down or up; returns time.monotonic() just before the change."""
        t = time.monotonic()
        self._ip("-n", self.ns[side], "link", "set", f"eth{k}", "up" if up else "down")
        return t

    def set_blackhole(self, side: str, k: int, on: bool) -> float:
        """Drop everything in and out of ethK of one side (nftables) while its link stays up: a
        fabric failure no netlink event reports. Returns time.monotonic() just before."""
        t = time.monotonic()
        if on:
            rules = "\n".join(["table inet fleetbh {",
                               f"  chain i {{ type filter hook input priority 0; iifname \"eth{k}\" drop; }}",
                               f"  chain o {{ type filter hook output priority 0; oifname \"eth{k}\" drop; }}",
                               "}", ""])
            subprocess.run(["ip", "netns", "exec", self.ns[side], "nft", "-f", "-"], input=rules, check=True,
                           capture_output=True, text=True)
        else:
            subprocess.run(["ip", "netns", "exec", self.ns[side], "nft", "delete", "table", "inet", "fleetbh"],
                           capture_output=True)
        return t

    def env(self, side: str, **extra: str) -> dict:
        env = dict(os.environ)
        env.update({"FLEET_NET_IFACES": ",".join(self.addr[side]),
                    "FLEET_NET_COUNTERS_DIR": str(self.tmp / f"counters-{side}"),
                    "FLEET_NET_LOG": str(self.tmp / f"events-{side}.jsonl")})
        env.update(extra)
        return env

    def popen(self, side: str, args: list[str], env: dict) -> subprocess.Popen:
        # `ip netns exec` also remounts /sys for the namespace, so sysfs shows its interfaces
        return subprocess.Popen(["ip", "netns", "exec", self.ns[side], *args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def events(self, side: str) -> list[dict]:
        path = self.tmp / f"events-{side}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def pair(self, version: int = 12, *, seconds: float = 0, messages: int = 0, max_size: int = 1 << 20,
             min_size: int = 16, seed: int = 1, extra_env: dict | None = None, trace: bool = False,
             plain: bool = False, paths: int | None = None, stop_file: Path | None = None) -> tuple[subprocess.Popen, subprocess.Popen, dict]:
        """Start receiver in b and sender in a; returns (recv, send, files)."""
        files = {"handle": self.tmp / f"handle-{time.monotonic_ns()}",
                 "trace": self.tmp / "trace.txt", "progress": self.tmp / "progress.txt"}
        common = ["--max-size", str(max_size), "--min-size", str(min_size), "--seed", str(seed),
                  "--handle-file", str(files["handle"])]
        if seconds:
            common += ["--seconds", str(seconds)]
        if messages:
            common += ["--messages", str(messages)]
        if stop_file:
            common += ["--stop-file", str(stop_file)]
        if plain:
            base = [str(HARNESS), "--plain", *common]
            recv = self.popen("b", [*base, "--role", "recv", "--addr", self.addr["b"][0]], self.env("b"))
            send = self.popen("a", [*base, "--role", "send"], self.env("a"))
            return recv, send, files
        base = [str(HARNESS), "--lib", str(LIB), "--version", str(version), *common]
        env_a, env_b = self.env("a", **(extra_env or {})), self.env("b", **(extra_env or {}))
        if paths:
            env_a["FLEET_NET_IFACES"] = ",".join(self.addr["a"][:paths])
            env_b["FLEET_NET_IFACES"] = ",".join(self.addr["b"][:paths])
        recv = self.popen("b", [*base, "--role", "recv"], env_b)
        sargs = [*base, "--role", "send", "--progress", str(files["progress"])]
        if trace:
            sargs += ["--trace", str(files["trace"])]
        send = self.popen("a", sargs, env_a)
        return recv, send, files
