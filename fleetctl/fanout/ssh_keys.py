"""The private keys the ssh transport offers, read once per transport."""

from __future__ import annotations

import os

from fleetctl.errors import ConfigError

DEFAULT_KEY_FILES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")


def load_keys(identity_file: str) -> list:
    """The private keys to offer: the identity file alone, else the agent's keys and ~/.ssh/id_*."""
    import paramiko  # already imported (without invoke) by the ssh transport

    if identity_file:
        path = os.path.expanduser(identity_file)
        try:
            return [paramiko.PKey.from_path(path)]
        except FileNotFoundError:
            raise ConfigError(f"identity file {path} not found", key="access.ssh.identity_file") from None
        except paramiko.PasswordRequiredException:
            raise ConfigError(f"identity file {path} is encrypted; load it into ssh-agent and leave "
                              "identity_file empty", key="access.ssh.identity_file") from None
        except (paramiko.SSHException, OSError, ValueError) as exc:
            raise ConfigError(f"cannot load identity file {path}: {exc}",
                              key="access.ssh.identity_file") from None
    keys: list = []
    try:
        keys += list(paramiko.Agent().get_keys())
    except paramiko.SSHException:
        pass
    for name in DEFAULT_KEY_FILES:
        path = os.path.expanduser(name)
        if os.path.exists(path):
            try:
                keys.append(paramiko.PKey.from_path(path))
            except (paramiko.SSHException, OSError, ValueError):
                continue  # encrypted or unreadable: OpenSSH would skip it too without a passphrase
    return keys
