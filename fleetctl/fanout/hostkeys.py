"""Host-key checking against a known_hosts file, read once per transport (not once per host).

Policies (schema `access.ssh.host_key_policy`):
- strict: an unknown host is refused, a changed key is refused;
- accept-new: an unknown host is trusted and recorded in known_hosts, a changed key is refused;
- ignore: every key is trusted and nothing is recorded (lab use only).
A host is looked up under its node name and under the address connected to (`[addr]:port` when the
port is not 22, as OpenSSH writes it), so files written by `ssh` and by `ssh-keyscan` both work.

The file is indexed as text (key type and base64 blob), not parsed into key objects: a fleet's
known_hosts has thousands of lines, and paramiko's HostKeys re-scans every entry for every line
loaded. Plain names are a dict lookup; hashed names (`|1|salt|hash`) cost one HMAC per hashed line
per host, as in OpenSSH. `@revoked` keys are refused; `@cert-authority` lines and patterns
(`*.example.com`) are not supported and are skipped.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
from pathlib import Path

from fleetctl.errors import ConfigError
from fleetctl.fanout.result import HOSTKEY_MISMATCH, HOSTKEY_UNKNOWN

POLICIES = ("strict", "accept-new", "ignore")

# The names a known_hosts key type may be negotiated under (RSA keys sign with SHA-2 nowadays).
_NEGOTIATED = {"ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")}


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class HostKeyRefused(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class KnownHosts:
    def __init__(self, path: str, policy: str):
        if policy not in POLICIES:
            raise ConfigError(f"unknown host_key_policy {policy!r}; expected one of {', '.join(POLICIES)}")
        self.path = str(Path(path).expanduser()) if path else ""
        self.policy = policy
        self._lock = threading.Lock()
        self._plain: dict[str, dict[str, str]] = {}  # name -> key type -> base64 blob
        self._hashed: list[tuple[bytes, bytes, str, str]] = []  # salt, digest, key type, blob
        self._revoked: set[str] = set()
        if policy != "ignore" and self.path:
            try:
                self._load(self.path)
            except FileNotFoundError:
                if policy == "strict":
                    raise ConfigError(f"known_hosts file {self.path} not found (host_key_policy is "
                                      "strict)", hint="create it with ssh-keyscan, or set "
                                      "access.ssh.host_key_policy = \"accept-new\"") from None
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read known_hosts file {self.path}: {exc}") from None

    def _load(self, path: str) -> None:
        with open(path) as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 3 or fields[0].startswith("#"):
                    continue
                if fields[0].startswith("@"):
                    if fields[0] == "@revoked" and len(fields) >= 4:
                        self._revoked.add(fields[3])
                    continue
                names, keytype, blob = fields[:3]
                for name in names.split(","):
                    self._add(name, keytype, blob)

    def _add(self, name: str, keytype: str, blob: str) -> None:
        if name.startswith("|1|"):
            try:
                _, _, salt, digest = name.split("|")
                self._hashed.append((base64.b64decode(salt), base64.b64decode(digest), keytype, blob))
            except ValueError:
                pass  # a malformed hashed name matches nothing, as in OpenSSH
        else:
            self._plain.setdefault(name, {}).setdefault(keytype, blob)

    def _known(self, names: list[str]) -> dict[str, str]:
        """Key type -> base64 blob known for any of the names."""
        found: dict[str, str] = {}
        with self._lock:
            for name in names:
                for keytype, blob in self._plain.get(name, {}).items():
                    found.setdefault(keytype, blob)
                for salt, digest, keytype, blob in self._hashed:
                    if hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest):
                        found.setdefault(keytype, blob)
        return found

    def preferred_key_types(self, names: list[str], offered: list[str]) -> list[str]:
        """Host-key algorithms to offer, the ones known for this host first (as OpenSSH orders them),
        so that a host known by its RSA key is not reported unknown because it also has ed25519."""
        if self.policy == "ignore":
            return offered
        first: list[str] = []
        for keytype in self._known(names):
            first += [t for t in _NEGOTIATED.get(keytype, (keytype,)) if t in offered and t not in first]
        return first + [t for t in offered if t not in first]

    def check(self, node: str, names: list[str], key) -> None:
        """Raise HostKeyRefused unless the policy accepts `key` (a paramiko PKey) for this host."""
        if self.policy == "ignore":
            return
        keytype, blob = key.get_name(), key.get_base64()
        if blob in self._revoked:
            raise HostKeyRefused(HOSTKEY_MISMATCH, f"the {keytype} host key of {names[-1]} is marked "
                                 f"@revoked in {self.path}")
        known = self._known(names)
        if not known:
            if self.policy == "strict":
                raise HostKeyRefused(HOSTKEY_UNKNOWN, f"host key of {names[-1]} ({keytype}) is not in "
                                     f"{self.path or 'known_hosts'} (strict policy)")
            self._record(names[-1], keytype, blob)
            return
        expected = known.get(keytype)
        if expected is None:
            raise HostKeyRefused(HOSTKEY_MISMATCH, f"{names[-1]} presented a {keytype} host key but "
                                 f"{self.path} holds only {', '.join(sorted(known))} keys for it")
        if expected != blob:
            raise HostKeyRefused(HOSTKEY_MISMATCH, f"HOST KEY MISMATCH for {node}: {keytype} "
                                 f"{key.fingerprint} does not match {self.path} (possible "
                                 "impersonation; remove the stale entry if the host was reinstalled)")

    def _record(self, name: str, keytype: str, blob: str) -> None:
        """accept-new: remember the key in memory and append it to the file (one line, under a lock,
        so parallel first contacts do not interleave)."""
        with self._lock:
            if name in self._plain:
                return
            self._add(name, keytype, blob)
            if not self.path:
                return
            os.makedirs(os.path.dirname(self.path) or ".", mode=0o700, exist_ok=True)
            with open(self.path, "a") as fh:
                fh.write(f"{name} {keytype} {blob}\n")
