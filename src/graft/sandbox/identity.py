"""Who a sandboxed program is on the host (host side): the ids of the sandbox's user namespace.

Run as root (in a container, or on a machine like CI's), graft maps two ids into each
sandbox's user namespace: 0 for the sandbox's init (root of that namespace only) and
`PROGRAM_ID` for the programs, mapped to an unprivileged host uid and gid of their own:
`GRAFT_SANDBOX_UID`, by default 2000000000, in the range systemd leaves unused, which no account
has. A program is never host root, never the init's uid, and each one is, in turn, root of a
user namespace of its own inside (`inner.enter_own_namespaces`).

Without root, a process can map only its own uid into a user namespace: programs then run as
the trainer's own uid, and `graft code doctor` names that defence as weaker. Where that uid is
root outside (graft run as root of a user namespace that maps only root), the sandbox refuses
to start: a program must never be host root.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

PROGRAM_ID = 1000
"""The programs' id in the sandbox's user namespace (where the init is 0)."""
DEFAULT_UID = 2_000_000_000
ENV_UID = "GRAFT_SANDBOX_UID"
CAP_SETGID, CAP_SETUID = 6, 7


@dataclass(frozen=True)
class Identity:
    """The maps a sandbox's user namespace gets, and the programs' ids there and on the host.
    `why_shared` says why programs share the trainer's uid ("" when they have their own)."""

    host_uid: int
    """The programs' uid as graft's own user namespace sees it: the host's, unless graft itself
    runs in a container's user namespace."""
    host_gid: int
    program_id: int
    uid_map: str
    gid_map: str
    deny_setgroups: bool
    why_shared: str = ""


def _chosen_uid(named: str, euid: int) -> int:
    if not named:
        return DEFAULT_UID
    try:
        uid = int(named)
    except ValueError:
        uid = -1
    if not 0 < uid < 4294967295 or uid == euid:
        raise ValueError(
            f"{ENV_UID}={named}: an unprivileged uid is expected (1 to 4294967294, not this "
            "process's own)"
        )
    return uid


def _outside(id_map: str, value: int) -> int | None:
    """`value`, an id of this user namespace, as its parent sees it (the host's own, where
    this is the host's namespace); None when it is not an id here."""
    for line in id_map.splitlines():
        inside, outside, count = map(int, line.split())
        if inside <= value < inside + count:
            return outside + value - inside
    return None


def choose(
    euid: int, egid: int, can_set_ids: bool, uid_map: str, gid_map: str, named: str = ""
) -> Identity:
    """The ids for a process with these ids, capabilities (CAP_SETUID and CAP_SETGID) and
    `/proc/self/{uid,gid}_map`, and `GRAFT_SANDBOX_UID` = `named` (module docstring);
    ValueError for a bad `named`, or where programs would be root outside."""
    program = _chosen_uid(named, euid)
    if euid == 0 and can_set_ids:
        if _outside(uid_map, program) is not None and _outside(gid_map, program) is not None:
            return Identity(
                program, program, PROGRAM_ID,
                f"0 {euid} 1\n{PROGRAM_ID} {program} 1\n",
                f"0 {egid} 1\n{PROGRAM_ID} {program} 1\n",
                deny_setgroups=False,
            )  # fmt: skip
        why = f"uid {program} is not an id of this container's user namespace (set {ENV_UID})"
    else:
        why = (
            f"graft runs as uid {euid}, not root, and a process can map only its own uid into "
            "a user namespace"
        )
    if _outside(uid_map, euid) == 0:
        raise ValueError(
            "sandboxed programs would run as root of the host (or of the user namespace graft "
            f"runs in): {why}. Run graft as root of the host, or name an unprivileged uid of "
            f"this namespace in {ENV_UID}"
        )
    return Identity(euid, egid, 0, f"0 {euid} 1\n", f"0 {egid} 1\n", deny_setgroups=True,
                    why_shared=why)  # fmt: skip


@cache
def identity() -> Identity:
    """This process's ids for its sandboxes (`choose`)."""
    with open("/proc/self/status") as f:
        caps = next(int(x.split()[1], 16) for x in f if x.startswith("CapEff:"))
    can_set_ids = bool(caps & (1 << CAP_SETUID)) and bool(caps & (1 << CAP_SETGID))
    maps = []
    for kind in ("uid", "gid"):
        with open(f"/proc/self/{kind}_map") as f:
            maps.append(f.read())
    return choose(os.geteuid(), os.getegid(), can_set_ids, *maps, os.environ.get(ENV_UID, ""))


def write_maps(pid: int, ident: Identity) -> None:
    """Give process `pid`'s new user namespace its ids (from outside it)."""
    if ident.deny_setgroups:
        with open(f"/proc/{pid}/setgroups", "w") as f:
            f.write("deny")
    for kind, text in (("uid", ident.uid_map), ("gid", ident.gid_map)):
        with open(f"/proc/{pid}/{kind}_map", "w") as f:
            f.write(text)
