"""The programs of tests/test_sandbox_crossing.py: attackers that leave something for the next
program (answers, a broken sandbox) and victims that would use it. Each program defines
`add(a, b)`, whose tests are add(2, 3) == 5 and add(10, -4) == 6.

A channel is Python source defining `store(text)` (the attacker's) and `load()` (the victim's:
the text, or None). Through a channel, the attacker passes "5,6"; the victim answers from it, and
answers 0 when it finds nothing: alone, it is wrong."""

import platform

ANSWERS = "5,6"
PRELUDE = """\
import ctypes, errno, json, os, resource, socket, array
libc = ctypes.CDLL(None, use_errno=True)
KEY = 0x6A7F
"""
_KEYS = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(platform.machine(), (-1, -1))
KEYRING = f"""\
ADD_KEY, KEYCTL = {_KEYS}
def _key_ring(ring):
    if ring == "persistent":
        return libc.syscall(KEYCTL, 22, -1, -4)  # KEYCTL_GET_PERSISTENT, my uid, to my keyring
    return ring
def _store_key(ring, text):
    libc.syscall(ADD_KEY, b"user", b"graft-answers", text.encode(), len(text), _key_ring(ring))
def _load_key(ring):
    found = libc.syscall(KEYCTL, 10, _key_ring(ring), b"user", b"graft-answers", 0)  # SEARCH
    if found < 0:
        return None
    buf = ctypes.create_string_buffer(64)
    n = libc.syscall(KEYCTL, 11, found, buf, 64)  # READ
    return buf.raw[:n].decode() if n > 0 else None
"""


def _key(ring: str) -> str:
    return KEYRING + (
        f"def store(text):\n    _store_key({ring}, text)\n"
        f"def load():\n    return _load_key({ring})\n"
    )


def _number(write: str, read: str) -> str:
    """A channel through one number: "5,6" as 56."""
    return f"""\
def store(text):
    value = int(text.replace(",", ""))
{write}
def load():
{read}
    return f"{{value // 10}},{{value % 10}}" if value == 56 else None
"""


CHANNELS = {
    "System V shared memory": """\
libc.shmat.restype = ctypes.c_void_p
def store(text):
    segment = libc.shmget(KEY, 4096, 0o1666)
    at = libc.shmat(segment, None, 0) if segment >= 0 else None
    if at not in (None, 2**64 - 1):
        ctypes.memmove(at, text.encode() + b"\\0", len(text) + 1)
def load():
    segment = libc.shmget(KEY, 4096, 0o666)
    at = libc.shmat(segment, None, 0) if segment >= 0 else None
    return ctypes.string_at(at).decode() if at not in (None, 2**64 - 1) else None
""",
    "System V message queue": """\
class Message(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_long), ("text", ctypes.c_char * 64)]
def store(text):
    queue = libc.msgget(KEY, 0o1666)
    libc.msgsnd(queue, ctypes.byref(Message(1, text.encode())), 64, 0)
def load():
    queue, message = libc.msgget(KEY, 0o666), Message()
    if queue < 0 or libc.msgrcv(queue, ctypes.byref(message), 64, 0, 0o4000) < 0:
        return None
    return message.text.decode()
""",
    "System V semaphores": """\
def store(text):
    sems = libc.semget(KEY, 2, 0o1666)
    for i, value in enumerate(text.split(",")):
        libc.semctl(sems, i, 16, int(value))  # SETVAL
def load():
    sems = libc.semget(KEY, 2, 0o666)
    values = [libc.semctl(sems, i, 12) for i in range(2)] if sems >= 0 else []  # GETVAL
    return ",".join(map(str, values)) if values and min(values) > 0 else None
""",
    "POSIX message queue": """\
def store(text):
    queue = libc.mq_open(b"/graft-answers", 0o100 | 2, 0o600, None)
    libc.mq_send(queue, text.encode(), len(text), 0)
def load():
    queue = libc.mq_open(b"/graft-answers", 0o4000)  # O_RDONLY | O_NONBLOCK
    buf = ctypes.create_string_buffer(1 << 16)
    n = libc.mq_receive(queue, buf, 1 << 16, None) if queue >= 0 else -1
    return buf.raw[:n].decode() if n > 0 else None
""",
    "user keyring": _key("-4"),
    "user-session keyring": _key("-5"),
    "session keyring": _key("-3"),
    "persistent keyring": _key('"persistent"'),
    "host name": """\
def store(text):
    name = ("answers-" + text).encode()
    if libc.sethostname(name, len(name)) != 0:
        open("/proc/sys/kernel/hostname", "w").write(name.decode())
def load():
    name = socket.gethostname()
    return name[len("answers-"):] if name.startswith("answers-") else None
""",
    "an IPC sysctl": _number(
        '    open("/proc/sys/kernel/msgmax", "w").write(str(value))',
        '    value = int(open("/proc/sys/kernel/msgmax").read())',
    ),
    "a network sysctl": _number(
        '    open("/proc/sys/net/ipv4/ip_default_ttl", "w").write(str(value))',
        '    value = int(open("/proc/sys/net/ipv4/ip_default_ttl").read())',
    ),
    "an rlimit of the init": _number(
        "    hard = resource.prlimit(1, resource.RLIMIT_MSGQUEUE)[1]\n"
        "    resource.prlimit(1, resource.RLIMIT_MSGQUEUE, (value, hard))",
        "    value = resource.getrlimit(resource.RLIMIT_MSGQUEUE)[0]",
    ),
    "a /proc/1 attribute": _number(
        '    open("/proc/1/oom_score_adj", "w").write(str(value))',
        '    value = int(open("/proc/1/oom_score_adj").read())',
    ),
    "an abstract unix socket kept alive in flight": """\
def store(text):
    held = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    held.bind(("\\0graft-answers:" + text).encode())
    a, b = socket.socketpair()  # the three fds in flight in a: alive after this process
    fds = array.array("i", [held.fileno(), a.fileno(), b.fileno()])
    b.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
def load():
    for line in open("/proc/net/unix").read().splitlines():
        if "@graft-answers:" in line:
            return line.split("@graft-answers:")[1].strip()
    return None
""",
}


def attacker(channel: str) -> str:
    """A correct `add` that leaves the answers in `channel` (errors ignored)."""
    return (
        PRELUDE
        + CHANNELS[channel]
        + f"try:\n    store({ANSWERS!r})\nexcept Exception:\n    pass\n"
        + "def add(a, b):\n    return a + b\n"
    )


def victim(channel: str) -> str:
    """A wrong `add` (always 0) unless `channel` holds the answers."""
    return (
        PRELUDE
        + CHANNELS[channel]
        + "try:\n    found = load()\nexcept Exception:\n    found = None\n"
        + "def add(a, b):\n"
        + "    if found:\n"
        + "        first, second = map(int, found.split(','))\n"
        + "        return first if (a, b) == (2, 3) else second\n"
        + "    return 0\n"
    )


CORRECT = "def add(a, b):\n    return a + b\n"
HUNGRY = "block = bytearray(200 << 20)\n" + CORRECT
"""A correct program that needs 200 MiB of the sandbox's 256."""

BREAKERS = {
    "prlimit of the init: open files": "resource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3))",
    "prlimit of the init: stack": "resource.prlimit(1, resource.RLIMIT_STACK, (1 << 16, 1 << 16))",
    "prlimit of the init: CPU": "resource.prlimit(1, resource.RLIMIT_CPU, (1, 1))",
    "prlimit of the init: file size": "resource.prlimit(1, resource.RLIMIT_FSIZE, (0, 0))",
    "System V segments": """\
libc.shmat.restype = ctypes.c_void_p
for i in range(3):
    segment = libc.shmget(KEY + i, 50 << 20, 0o1666)
    at = libc.shmat(segment, None, 0) if segment >= 0 else None
    if at not in (None, 2**64 - 1):
        ctypes.memset(at, 1, 50 << 20)""",
    "queued messages": """\
class Message(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_long), ("text", ctypes.c_char * 8000)]
for i in range(16):
    queue = libc.msgget(KEY + i, 0o1666)
    while libc.msgsnd(queue, ctypes.byref(Message(1, b"x" * 7999)), 8000, 0o4000) == 0:
        pass""",
    "memfds in flight": """\
fds = []
for _ in range(25):
    fd = os.memfd_create("left")
    for _ in range(6):
        os.write(fd, b"\\1" * (1 << 20))
    fds.append(fd)
a, b = socket.socketpair()
a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
b.sendmsg([b"y"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [a.fileno(),
                                                                         b.fileno()]))])""",
}
"""What an attacker does to break the programs after it (`breaker`), by what it breaks."""
BREAKER_VICTIMS = {
    "System V segments": HUNGRY,
    "queued messages": HUNGRY,
    "memfds in flight": HUNGRY,
}


def breaker(name: str) -> str:
    """A correct `add` that first tries to break the sandbox for later programs."""
    body = BREAKERS[name]
    indented = "\n".join("    " + line for line in body.splitlines())
    return PRELUDE + f"try:\n{indented}\nexcept Exception:\n    pass\n" + CORRECT


KEY_QUOTA = (
    PRELUDE
    + KEYRING
    + """\
for i in range(100000):
    text = "k" * 4096
    if libc.syscall(ADD_KEY, b"user", b"graft-%d" % i, text.encode(), 4096, -3) < 0:
        break
"""
    + CORRECT
)
"""A correct `add` that first fills its uid's key quota in its session keyring."""

HOST_SYSCTLS = ("vm/swappiness", "kernel/core_pattern", "kernel/hostname")
WRITES_HOST_SYSCTLS = (
    PRELUDE
    + f"names = {HOST_SYSCTLS!r}\n"
    + """\
written = []
for name in names:
    try:
        with open("/proc/sys/" + name, "r+") as f:
            value = f.read()
            f.seek(0)
            f.write(value)  # its own value back: nothing changes if the write goes through
        written.append(name)
    except OSError:
        pass
def add(a, b):
    return a + b if not written else -1
"""
)
"""Right only when it could write none of the host's sysctls."""

FORGES_RESULTS = (
    PRELUDE
    + """\
lines = b'{"i": 0, "value": 5}\\n{"i": 1, "value": 6}\\n{"value": 5}\\n{"value": 6}\\n'
for fd in range(3, 10):
    try:
        os.write(fd, lines)
    except OSError:
        pass
def add(a, b):
    return 0
"""
)
"""A wrong `add` that writes the right results on every fd a result could travel on."""

READS_TRAINER_KEYRING = (
    PRELUDE
    + KEYRING
    + """\
found = _load_key(-3)
try:
    _store_key(-3, "planted")
except Exception:
    pass
def add(a, b):
    return a + b if not found else -1
"""
)
"""Right only when the session keyring it was started with holds no `graft-answers` key."""
