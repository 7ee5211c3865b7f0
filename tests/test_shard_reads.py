"""A folder's shard headers read by forked copies of the process alongside it
(``sources/shard_reads.py``): every header, and every error, is what the process reading them
all itself gives, whichever copy read it and however a copy ends."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import write_safetensors
from processes import run_alone
from qarm_audit.sources import shard_reads
from qarm_audit.sources.checkpoint import ShardHeader
from qarm_audit.sources.local import read_local_shard
from qarm_audit.sources.shard_reads import read_headers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import synthetic

COMPARED = """
import os, signal, sys, time
from pathlib import Path
from qarm_audit.sources import shard_reads
from qarm_audit.sources.local import read_local_shard
from qarm_audit.sources.shard_reads import read_headers

root = Path(sys.argv[1])
shards = [(p.name, p) for p in sorted(root.glob("*.safetensors"))]
parent = os.getpid()
here = []

def read(path, file):
    if os.getpid() == parent:
        here.append(file)
    return read_local_shard(path, file)

def open_ends():
    return sorted(os.listdir("/proc/self/fd"))

def outcome(copies, reader=read, alone=True, **standing):
    here.clear()
    ends = open_ends()
    got = [
        (file, got if not isinstance(got, Exception) else f"{type(got).__name__}: {got}")
        for file, got in read_headers(shards, reader, copies=copies, **standing)
    ]
    if not alone:  # another child of the script's own is still there
        return got
    assert open_ends() == ends, "a pipe left open"
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:  # none: every copy, given work or dismissed, ended and was reaped
        pass
    else:
        raise AssertionError("a copy left behind")
    return got

itself = outcome(0)
assert here == [f for f, _ in shards]
files = [f for f, _ in shards]
assert [f for f, _ in itself] == files
assert any(isinstance(h, str) for _, h in itself), "a shard that does not read"
for copies in (1, 3):
    assert outcome(copies) == itself, copies
    # the copies read the later runs: here only the first run, and the shard that does not
    # read wherever a copy met it (read again here, for its error)
    first = files[: len(files) // (copies + 1)]
    assert here[: len(first)] == first and set(here[len(first):]) <= {"0013-broken.safetensors"}
    assert len(here) < len(files), here

def dying(at):
    def read_or_die(path, file):
        if os.getpid() != parent and file == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return read(path, file)
    return read_or_die

def failing(path, file):
    if os.getpid() != parent:
        raise RuntimeError("not a QarmError: the copy ends")
    return read(path, file)

later = files[-3]
assert outcome(1, dying(later)) == itself
assert later in here and files[-1] in here, here  # the rest of its run, read here
assert outcome(2, failing) == itself
assert here == files[: len(here)] and len(here) == len(files), here

def free_after(shards_read):
    return lambda: int(len(here) >= shards_read)

# a copy on standby, given the back of what is left once a CPU is free: after 3 shards here,
# 11 of the 22 left (the one that does not read is the last of the process's)
assert outcome(0, standbys=1, free=free_after(3)) == itself
assert here == files[:14] and files[13] == "0013-broken.safetensors", here
# two, each given the back half of what is left when asked, the later one nearer the front:
# 12 after the first shard, 6 after the second (the one that does not read, read again here)
shard_reads.MIN_SHARDS_PER_READER = 4
assert outcome(0, standbys=2, free=lambda: 1) == itself
assert here == files[:7] + ["0013-broken.safetensors"], here
shard_reads.MIN_SHARDS_PER_READER = 8
# never given work: dismissed, every shard read here
assert outcome(0, standbys=2, free=lambda: 0) == itself
assert here == files
# beside a copy started at once (the process's run of 12: 6 of them to the standby copy)
shard_reads.MIN_SHARDS_PER_READER = 4
assert outcome(1, standbys=1, free=lambda: 1) == itself
assert here == files[:6] + ["0013-broken.safetensors"], here
shard_reads.MIN_SHARDS_PER_READER = 8
# a standby copy that dies or fails part way
assert outcome(0, dying(files[20]), standbys=1, free=free_after(2)) == itself
assert files[20] in here and files[-1] in here, here  # its run's rest, read here
assert outcome(0, failing, standbys=1, free=free_after(2)) == itself
assert here == files

# one file descriptor to spare, none for a pipe: no copy, every shard read here, as it reads
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(map(int, open_ends())) + 8, hard))
filling = []
try:
    while True:
        filling.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    os.close(filling.pop())
try:
    got = [outcome(1), outcome(0, standbys=2, free=lambda: 1)]
finally:
    for end in filling:
        os.close(end)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
assert got == [itself, itself]
assert here == files

# no fork to be had: no copy, every shard read here (and no order written to a copy that is
# not there: with SIGPIPE at its default, as a program embedding the library may set it, that
# write would end the process)
real_fork = os.fork
def no_fork():
    raise OSError(11, "Resource temporarily unavailable")
os.fork = no_fork
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
try:
    got = [outcome(1), outcome(0, standbys=2, free=lambda: 1)]
finally:
    os.fork = real_fork
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
assert got == [itself, itself]
assert here == files

# a copy on standby that has ended before it is given work: not written to (SIGPIPE at its
# default again), what it would have read is read here
def children():
    return [int(pid) for pid in Path(f"/proc/{parent}/task/{parent}/children").read_text().split()]

def ended(pid):
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"

def killing_the_standby(path, file):
    if os.getpid() == parent and not here:
        for child in children():
            os.kill(child, signal.SIGKILL)
            while not ended(child):  # its pipes closed, not yet reaped
                time.sleep(0.001)
    return read(path, file)

signal.signal(signal.SIGPIPE, signal.SIG_DFL)
try:
    got = outcome(0, killing_the_standby, standbys=1, free=free_after(3))
finally:
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
assert got == itself
assert here == files

# a copy on standby is not at work until it is given work; one whose value waits in its pipe
# is at work no more
from qarm_audit.sources.aside import Aside, busy

def waiting_for(end):
    def work():
        os.read(end, 1)
        return iter(["done"])
    return work

go, release = os.pipe()
standing = Aside(waiting_for(go), standby=True)
assert standing.forked and busy() == 0
standing.to_work()
assert busy() == 1
os.write(release, b"x")
while not standing.ready():
    time.sleep(0.001)
assert busy() == 0
assert standing.next() == "done"
standing.close()

# by default, a copy on standby for each copy at work now, given the back of what is left once
# that copy's work is done
shard_reads._cpus = lambda: 2
other = Aside(waiting_for(go))
assert other.forked and busy() == 1

def read_freeing(path, file):
    if os.getpid() == parent and len(here) == 2 and busy():
        os.write(release, b"x")
        while not other.ready():
            time.sleep(0.001)
        assert busy() == 0
    return read(path, file)

assert outcome(None, read_freeing, alone=False) == itself
assert here == files[:14], here
assert other.next() == "done"
other.close()
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork is taken on Linux only")
def test_headers_read_by_copies_are_the_headers_read_here(tmp_path: Path) -> None:
    """In a process of its own (a fork needs the only thread): 24 shards read by the process
    alone, then with one and three copies, with copies on standby given work as CPUs come
    free or never, and with copies that die or fail part way, give the same headers and the
    same error, in the same order; every copy has ended, and every pipe is closed, when the
    reading does. The shards hold names with a line break, a quote and non-ASCII (the copies
    join names by line breaks where none holds one), metadata, no tensor at all, and one shard
    does not read."""
    root = tmp_path / "shards"
    root.mkdir()
    for number in range(24):
        names = {
            f"model.layers.{number}.mlp.down_proj.weight": ("F8_E4M3", [4, 8]),
            f"model.layers.{number}.mlp.down_proj.weight_scale": ("F32", []),
        }
        if number == 20:  # in a copy's run
            names = {"odd\nname.weight": ("BF16", [2]), 'q"uote.w': ("I8", [3]), "é.x": ("U8", [])}
        if number == 17:
            names = {}
        write_safetensors(
            root / f"{number:04d}-of.safetensors",
            names,
            metadata={"format": "pt"} if number % 2 else None,
        )
    (root / "0013-broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    assert run_alone(COMPARED, str(root)) == "ok\n"


AUDITED = """
import sys
from qarm_audit import audit
from qarm_audit.report.render_json import render_json
from qarm_audit.sources import shard_reads

copied = []
sent = shard_reads._sent
start = shard_reads.Aside
def watched_aside(work):
    copied.append(work)
    return start(work)
shard_reads.Aside = watched_aside

for root in sys.argv[1:]:
    shard_reads.MAX_COPIES = 0
    itself = render_json(audit(root))
    assert copied == []
    shard_reads.MAX_COPIES = 7
    aside = render_json(audit(root))
    assert copied and all(w.func is sent for w in copied), copied
    copied.clear()
    assert aside == itself, root
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork is taken on Linux only")
def test_the_audit_with_headers_read_by_copies_is_the_audit_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmark's two MoE checkpoints in 18 shards each: the whole report is
    byte-identical with the headers read by copies and by the process alone."""
    monkeypatch.setitem(
        synthetic.SHAPES, "tiny-shards", replace(synthetic.SHAPES["tiny"], per_shard=20)
    )
    roots = []
    for family in ("modelopt", "compressed-tensors"):
        roots.append(tmp_path / family)
        _count, files = synthetic.write_folder("tiny-shards", roots[-1], family, 40)
        assert files >= 16
    assert run_alone(AUDITED, *map(str, roots)) == "ok\n"


def test_copies_one_per_cpu_left_free_and_none_for_few_shards() -> None:
    assert shard_reads._copies(200, 4, 0) == 3
    assert shard_reads._copies(16, 4, 0) == 1  # eight shards each at least
    assert shard_reads._copies(15, 4, 0) == 0
    assert shard_reads._copies(200, 4, 1) == 2  # a copy already at work
    assert shard_reads._copies(200, 1, 0) == 0
    assert shard_reads._copies(2000, 64, 0) == 7


@pytest.mark.parametrize(
    ("cpu_max", "v1", "cpus"),
    [
        ("150000 100000\n", None, 2),  # docker --cpus=1.5, cgroup v2: rounded up
        ("max 100000\n", None, 8),  # no quota
        (None, ("100000", "100000"), 1),  # cgroup v1
        (None, ("-1", "100000"), 8),  # v1, no quota
        (None, None, 8),  # neither readable
        ("1600000 100000\n", None, 8),  # a quota above the CPUs the process may use
    ],
)
def test_a_containers_cpu_quota_bounds_the_copies(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cpu_max: str | None,
    v1: tuple[str, str] | None,
    cpus: int,
) -> None:
    monkeypatch.setattr(shard_reads.os, "sched_getaffinity", lambda _pid: set(range(8)))
    monkeypatch.setattr(shard_reads, "CPU_MAX", tmp_path / "cpu.max")
    monkeypatch.setattr(shard_reads, "CFS_QUOTA", tmp_path / "quota")
    monkeypatch.setattr(shard_reads, "CFS_PERIOD", tmp_path / "period")
    if cpu_max is not None:
        (tmp_path / "cpu.max").write_text(cpu_max)
    if v1 is not None:
        (tmp_path / "quota").write_text(v1[0])
        (tmp_path / "period").write_text(v1[1])
    assert shard_reads._cpus() == cpus


def test_without_copies_every_shard_is_read_here_in_order(tmp_path: Path) -> None:
    for number in range(3):
        write_safetensors(tmp_path / f"{number}.safetensors", {"a.weight": ("F32", [number])})
    shards = [(p.name, p) for p in sorted(tmp_path.glob("*.safetensors"))]
    seen: list[str] = []

    def read(path: Path, file: str) -> ShardHeader:
        seen.append(file)
        return read_local_shard(path, file)

    got = list(read_headers(shards, read, copies=0))
    assert [file for file, _ in got] == seen == [file for file, _ in shards]
    assert [h.tensors[0].shape for _, h in got if isinstance(h, ShardHeader)] == [(0,), (1,), (2,)]
