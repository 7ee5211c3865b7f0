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
from qarm_audit.sources import aside, shard_reads
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
files = [f for f, _ in shards]
parent = os.getpid()
here = []

def read(path, file):
    if os.getpid() == parent:
        here.append(file)
    return read_local_shard(path, file)

def open_ends():
    return sorted(os.listdir("/proc/self/fd"))

def outcome(copies, reader=read):
    here.clear()
    ends = open_ends()
    got = [
        (file, got if not isinstance(got, Exception) else f"{type(got).__name__}: {got}")
        for file, got in read_headers(shards, reader, copies=copies)
    ]
    assert open_ends() == ends, "a pipe left open"
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:  # none: every copy ended and was reaped
        pass
    else:
        raise AssertionError("a copy left behind")
    assert sorted(f for f, _ in got) == files, "a shard given twice, or not at all"
    return dict(got)

itself = outcome(0)
assert here == files  # in order, where no copy reads
assert any(isinstance(h, str) for h in itself.values()), "a shard that does not read"
for copies in (1, 3):
    assert outcome(copies) == itself, copies

# copies that send nothing until the process has read every shard no copy is parsing: the
# process reads all of them, from the back of the longest run left, and waits for the rest
go, release = os.pipe()

def drain():  # what the copies did not take, for the next round
    os.set_blocking(go, False)
    try:
        os.read(go, len(files))
    except BlockingIOError:
        pass
    os.set_blocking(go, True)

def held_back(path, file):
    if os.getpid() != parent:
        os.read(go, 1)  # one byte each: let through once the process has read its part
        time.sleep(0.2)  # by then waiting on the copies' pipes
    else:
        here.append(file)
        if len(here) == len(files) - copies:
            os.write(release, b"x" * len(files))
    return read_local_shard(path, file)

for copies, fronts in ((1, [0]), (3, [0, 8, 16])):
    assert outcome(copies, held_back) == itself, copies
    assert sorted(here) == [f for n, f in enumerate(files) if n not in fronts], here
    assert here[0] == files[-1], here  # the back first
    drain()

# the same with the copies' pipes numbered past what select() takes (a process holding many
# files): the process still waits on them, having read its part
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard == resource.RLIM_INFINITY or hard >= 1200:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100 - len(open_ends()))]
    try:
        copies = 1
        assert outcome(copies, held_back) == itself
        assert sorted(here) == files[1:], here
    finally:
        for end in held:
            os.close(end)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    drain()

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

later = files[3]
assert outcome(1, dying(later)) == itself
assert later in here, here  # the rest of its run, read here
assert outcome(2, failing) == itself
assert sorted(here) == files, here

# one file descriptor to spare, none for a pipe: no copy, every shard read here, as it reads
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(map(int, open_ends())) + 8, hard))
filling = []
try:
    while True:
        filling.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    os.close(filling.pop())
try:
    got = outcome(1)
finally:
    for end in filling:
        os.close(end)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
assert got == itself
assert sorted(here) == files

# no fork to be had: no copy, every shard read here
real_fork = os.fork
def no_fork():
    raise OSError(11, "Resource temporarily unavailable")
os.fork = no_fork
try:
    got = outcome(3)
finally:
    os.fork = real_fork
assert got == itself
assert sorted(here) == files
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork is taken on Linux only")
def test_headers_read_by_copies_are_the_headers_read_here(tmp_path: Path) -> None:
    """In a process of its own (a fork needs the only thread): 24 shards read by the process
    alone, then with one and three copies, with copies held back until the process has read
    its part, and with copies that die or fail part way, give the same headers and the same
    error, each shard once; every copy has ended, and every pipe is closed, when the reading
    does. The shards hold names with a line break, a quote and non-ASCII (the copies join
    names by line breaks where none holds one), metadata, no tensor at all, and one shard does
    not read."""
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
    assert run_alone(COMPARED, str(root), timeout=120) == "ok\n"


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
    assert shard_reads._copies(200, 4) == 3
    assert shard_reads._copies(16, 4) == 1  # eight shards each at least, the process's too
    assert shard_reads._copies(15, 4) == 0
    assert shard_reads._copies(200, 1) == 0
    assert shard_reads._copies(2000, 64) == 7


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
    monkeypatch.setattr(aside.os, "sched_getaffinity", lambda _pid: set(range(8)))
    monkeypatch.setattr(aside, "CPU_MAX", tmp_path / "cpu.max")
    monkeypatch.setattr(aside, "CFS_QUOTA", tmp_path / "quota")
    monkeypatch.setattr(aside, "CFS_PERIOD", tmp_path / "period")
    if cpu_max is not None:
        (tmp_path / "cpu.max").write_text(cpu_max)
    if v1 is not None:
        (tmp_path / "quota").write_text(v1[0])
        (tmp_path / "period").write_text(v1[1])
    assert aside.usable_cpus() == cpus


def test_a_header_sent_by_a_copy_is_the_header_parsed(tmp_path: Path) -> None:
    """What a copy sends for a header gives that header back, whatever its names hold: names
    go as one string split at line breaks only where no name holds one. Deterministic, where
    the copies' own test leaves to timing which shard a copy parses."""
    names = {
        "odd\nname.weight": ("BF16", [2]),
        'q"uote.w': ("I8", [3]),
        "é.x": ("U8", []),
        "plain.weight": ("F32", [1, 2]),
    }
    for held in (names, {n: v for n, v in names.items() if "\n" not in n}, {}):
        shard = tmp_path / f"{len(held)}.safetensors"
        write_safetensors(shard, held, metadata={"format": "pt"})
        header = read_local_shard(shard, shard.name)
        assert shard_reads._header(shard.name, shard_reads._columns(header)) == header


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
