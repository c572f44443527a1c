"""The sandbox ``choir.exec`` runs its commands in: bubblewrap (``bwrap``).

A shell command from a model runs as the agent's user, so without a sandbox it can read
everything the agent can: ``/proc/<agent pid>/environ`` holds the agent's API keys (the
command's own environment is stripped, its parent's is not), and ``| rev`` defeats any
redaction of the output. The sandbox takes away what it must not see rather than trying to
scrub what it printed:

* its own PID namespace and a fresh ``/proc``: the agent's processes do not exist for it;
* a mount view of its own: the system's programs and libraries read-only (``/usr`` and the
  ``/bin``, ``/sbin``, ``/lib*`` next to it), only the few files of ``/etc`` that programs
  need to start (never ``/etc`` as a whole: ``/etc/shadow`` is readable by root), a fresh
  ``/tmp``, a minimal ``/dev``, and the workspace, bound at its own path, as the only place
  it can write;
* no network unless the tool was built with ``network=True`` (its own empty network
  namespace), no other namespace shared (IPC, UTS, cgroup, user), no capabilities;
* a clean environment (``PATH``, ``LANG``, ``HOME=/tmp``), a new session (no terminal to
  inject keystrokes into), and death with the arbiter's process.

Where no sandbox can be made (``bwrap`` missing, or the kernel refusing it the namespaces),
the tool refuses to run and says how to install bubblewrap; ``unsandboxed=True`` opts out,
and every such result says so.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["INSTALL_HINT", "SANDBOX_ENV", "find_bwrap", "sandbox_argv", "sandbox_problem"]

INSTALL_HINT: Final = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
    "bubblewrap) and allow unprivileged user namespaces, or build the tool with "
    "builtin_tools(exec_unsandboxed=True) to run commands without a sandbox"
)
SANDBOX_ENV: Final = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
"""The whole environment a sandboxed command starts with."""

# Next to /usr, each either a symlink into it (merged /usr: recreated as that symlink) or a
# directory of its own (bound read-only).
_SYSTEM_DIRS: Final = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What of /etc dynamic linking, name lookups and shells need; no secrets among them.
_ETC_FILES: Final = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
)
# Only with the network: resolving names and checking TLS certificates.
_ETC_NETWORK: Final = ("/etc/hosts", "/etc/resolv.conf", "/etc/ssl", "/etc/ca-certificates")


def sandbox_argv(
    bwrap: str, workspace: Path | None, command: Sequence[str], *, network: bool
) -> list[str]:
    """The ``bwrap`` command line running ``command`` confined to ``workspace``."""
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    if network:
        argv.append("--share-net")
    argv += ["--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in (*_ETC_FILES, *(_ETC_NETWORK if network else ())):
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    if workspace is not None:
        argv += ["--bind", str(workspace), str(workspace), "--chdir", str(workspace)]
    for name, value in SANDBOX_ENV.items():
        argv += ["--setenv", name, value]
    return [*argv, "--", *command]


def sandbox_problem(bwrap: str | None) -> str | None:
    """Why no sandbox can be made with ``bwrap`` (``None`` when one can)."""
    if bwrap is None:
        return "bubblewrap ('bwrap') is not installed"
    return _probe(bwrap)


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str) -> str | None:
    """Start one empty sandbox, once per ``bwrap`` per process: namespaces can be refused
    (a container without user namespaces, a kernel setting) although the program is there."""
    argv = sandbox_argv(bwrap, None, ["/bin/true"], network=False)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap at {bwrap} could not be started: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}"
        return f"bubblewrap at {bwrap} cannot make a sandbox here: {why}"
    return None


def find_bwrap() -> str | None:
    """The ``bwrap`` program on the arbiter's ``PATH``, or ``None``."""
    return shutil.which("bwrap")
