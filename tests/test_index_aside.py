"""A folder's index proven aside, in a forked child, while the audit goes on: the report and
every error are what reading first and auditing after give, whichever way the proof ends."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
import pytest

from conftest import write_safetensors
from processes import run_alone
from qarm_audit import audit
from qarm_audit.errors import QarmError
from qarm_audit.report.render_json import render_json
from qarm_audit.sources import open_source, settled
from qarm_audit.sources.aside import CheckAside
from qarm_audit.sources.checkpoint import DerivedIndex
from qarm_audit.sources.index import holds_as_plain, index_head
from qarm_audit.sources.local import read_local_shard
from test_index_of_headers import DISAGREEING, FIRST, INDEX, SECOND, TWO, folder, hub_index

FORKED = """
import os, signal, sys, time
from qarm_audit.errors import QarmError
from qarm_audit.sources.aside import LATE, Aside, CheckAside, can_fork

assert can_fork(), "one thread, on Linux"
parent = os.getpid()
asked = []

def answering(answer):
    def check():
        asked.append(os.getpid())  # seen here only where the check ran here
        return answer
    return check

def answered(aside):
    # the child's answer is taken once it is there (the check yields its CPU meanwhile)
    while not aside.ready():
        time.sleep(0.01)
    return aside

for answer in (True, False):
    aside = answered(CheckAside(answering(answer)))
    assert aside.forked
    assert aside.answer() is answer and aside.answer() is answer
assert asked == [], "answered by the child"

# the child runs at the lowest priority: at the nice value LATE above this process's
nice = os.nice(0)
niced = answered(CheckAside(lambda: os.nice(0) == min(nice + LATE, 19)))
assert niced.answer() is True and asked == []

# an answer not there when asked is not waited for: the child is stopped, the check runs here
def slow():
    if os.getpid() != parent:
        time.sleep(30)
    return answering(True)()

started = time.monotonic()
assert CheckAside(slow).answer() is True and asked == [parent]
assert time.monotonic() - started < 20
asked.clear()

# an answer on its way when asked is waited for, while the child gets on with it (at this
# process's priority here, so that the test's other load cannot starve it)
from qarm_audit.sources import aside as aside_module

def working(answer):
    def check():
        asked.append(os.getpid())
        if os.getpid() != parent:
            end = time.process_time() + 0.5
            while time.process_time() < end:
                pass
        return answer
    return check

aside_module.LATE = 0
assert CheckAside(working(False)).answer() is False and asked == []
aside_module.LATE = 19

def dying():
    if os.getpid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
    return True

assert answered(CheckAside(dying)).answer() is True

def failing():
    raise QarmError("x", "the check's own failure")

try:
    answered(CheckAside(failing)).answer()
except QarmError as exc:
    assert "the check's own failure" in str(exc)
else:
    raise AssertionError("a failing check failed nowhere")

# a stream of values, each as it is ready; a child that fails part way gives what it sent
def stream():
    yield {"a": [1, 2]}
    yield "x" * 200_000  # larger than a pipe's buffer
    raise QarmError("x", "failed after two values")

values = Aside(stream)
assert values.forked
assert values.next() == {"a": [1, 2]} and values.next() == "x" * 200_000
assert values.next() is None and not values.forked and values.next() is None

# what the child sent and is not read yet is seen as there, by ready() and by a wait on its
# pipe: it is in the pipe, never in a buffer here
def two_then_wait():
    yield 1
    yield 2
    time.sleep(30)

pair = Aside(two_then_wait)
time.sleep(0.2)  # both sent
assert pair.next() == 1
assert pair.ready()
import select
assert select.select([pair.fileno()], [], [], 5)[0]
assert pair.next() == 2
pair.close()

# a child still working when no more is wanted is stopped, not waited for
def endless():
    yield 1
    while True:
        pass

endless_aside = Aside(endless)
assert endless_aside.next() == 1
endless_aside.close()
assert not endless_aside.forked
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork is taken on Linux only")
def test_the_answer_comes_from_a_forked_child_or_is_found_here() -> None:
    """In a process of its own, where this is the only thread (a test process may have others,
    and then no child is forked): answered by the child; a child that dies or fails leaves the
    check to run here, with its own answer or error."""
    assert run_alone(FORKED, timeout=120) == "ok\n"


def test_without_a_fork_the_check_runs_here_once() -> None:
    asked: list[int] = []
    aside = CheckAside(lambda: asked.append(1) is None, fork=False)
    assert not aside.forked
    assert aside.answer() and aside.answer()
    assert asked == [1]


def test_a_proven_index_gives_the_checkpoint_read_without_the_proof_aside(tmp_path: Path) -> None:
    root = folder(tmp_path, TWO)
    optimistic = open_source(str(root), prove_aside=True)
    plain = open_source(str(root))
    assert optimistic.pending is not None and plain.pending is None
    assert settled(optimistic) is optimistic
    assert optimistic == plain
    assert optimistic.parsed_index is not None and plain.parsed_index is not None
    assert optimistic.parsed_index.from_headers
    assert dict(optimistic.parsed_index.weight_map) == plain.parsed_index.weight_map
    assert optimistic.parsed_index.shard_files == plain.parsed_index.shard_files
    assert len(optimistic.parsed_index.weight_map) == len(plain.parsed_index.weight_map)


@pytest.mark.parametrize(
    ("case", "weight_map", "code"), DISAGREEING, ids=[c[0] for c in DISAGREEING]
)
def test_an_index_the_proof_fails_gives_the_checkpoint_and_report_read_without_it(
    tmp_path: Path, case: str, weight_map: dict[str, str], code: str
) -> None:
    root = folder(tmp_path, TWO, weight_map)
    optimistic = open_source(str(root), prove_aside=True)
    plain = open_source(str(root))
    read = settled(optimistic)
    assert read is not optimistic and read == plain
    assert read.parsed_index is not None and not read.parsed_index.from_headers
    # the audit that ran on the optimistic checkpoint is run again on the one read
    assert render_json(audit(str(root))) == render_json(audit(plain))
    assert code in [r.code for r in audit(str(root)).refusals]


def test_an_index_that_does_not_parse_stops_the_audit_as_reading_it_does(tmp_path: Path) -> None:
    """The index's error comes first, before the declaration's, as when the index is read
    before the audit starts."""
    root = folder(tmp_path, TWO)
    text = (root / INDEX).read_text()
    line = f'    "b.weight": "{SECOND}",\n'
    (root / INDEX).write_text(text.replace(line, line + line))
    (root / "hf_quant_config.json").write_text(json.dumps({"quantization": "not an object"}))
    with pytest.raises(QarmError) as reading:
        open_source(str(root))
    with pytest.raises(QarmError) as auditing:
        audit(str(root))
    assert "duplicate" in str(reading.value)
    assert type(auditing.value) is type(reading.value)
    assert str(auditing.value) == str(reading.value)


def test_the_audits_own_error_stands_where_the_proof_holds(tmp_path: Path) -> None:
    root = folder(tmp_path, TWO)
    (root / "hf_quant_config.json").write_text(json.dumps({"quantization": "not an object"}))
    plain = open_source(str(root))
    with pytest.raises(QarmError) as sequential:
        audit(plain)
    with pytest.raises(QarmError) as aside:
        audit(str(root))
    assert type(aside.value) is type(sequential.value)
    assert str(aside.value) == str(sequential.value)


@pytest.mark.parametrize("total_size", [24, 24.0])
def test_a_shard_only_the_optimistic_reading_names_is_left_to_the_index(
    tmp_path: Path, total_size: float
) -> None:
    """A file beside the shards whose name no index may hold: the optimistic checkpoint, which
    would name it, fails; the proof fails too, and the checkpoint is the index's. Whether the
    index is read in windows or, for a float before the weight_map, whole."""
    root = folder(tmp_path, TWO, total_size=total_size)
    write_safetensors(root / "odd\\name.safetensors", {"z.weight": ("F32", (2,))})
    checkpoint = open_source(str(root), prove_aside=True)
    assert checkpoint == open_source(str(root))
    assert [shard.file for shard in checkpoint.shards] == [FIRST, SECOND]
    assert audit(str(root)).totals.tensors == 3


@pytest.mark.parametrize(
    ("name", "rest", "holds", "kept"),
    [
        ("a.weight", {"metadata": {"total_size": 8}}, True, False),
        ("caf\u00e9.weight", {"metadata": {"total_size": 8}}, False, True),
        ("del\x7f.weight", {"metadata": {"total_size": 8}}, False, True),
        ("a.weight", {"metadata": {"total_size": 8, "ratio": 0.5}}, True, True),
    ],
)
def test_an_index_read_in_windows_is_taken_as_plain_and_read_whole_where_it_is_not(
    tmp_path: Path, name: str, rest: dict[str, object], holds: bool, kept: bool
) -> None:
    """The process reads only the index's head and a few windows of it, and takes the text
    to be ASCII without DEL, which json.dumps writes as orjson does: a name that is not (only
    the whole text, read by the proof aside, tells) fails the proof, and the checkpoint is the
    one read whole, keeping the text. A float before the weight_map keeps the text too: the
    index is then read whole at once, and the proof holds."""
    write_safetensors(tmp_path / FIRST, {name: ("F32", (2,))})
    text = orjson.dumps(
        {**rest, "weight_map": {name: FIRST}}, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    ).decode()
    (tmp_path / INDEX).write_text(text, encoding="utf-8")
    optimistic = open_source(str(tmp_path), prove_aside=True)
    plain = open_source(str(tmp_path))
    read = settled(optimistic)
    assert (read is optimistic) == holds
    assert read == plain
    derived = DerivedIndex(rest=rest, tail="")
    assert (read.index_text, read.derived_index) == ((text, None) if kept else (None, derived))
    assert render_json(audit(str(tmp_path))) == render_json(audit(plain))


@pytest.mark.parametrize("tail", ["\n", ""])
def test_an_index_taken_as_plain_holds_only_with_the_end_it_was_taken_to_have(
    tmp_path: Path, tail: str
) -> None:
    """The final newline is read from a window before the proof reads the whole text: a text
    that ends otherwise when read whole (written again meanwhile) does not hold."""
    root = folder(tmp_path, TWO, tail=tail)
    raw = (root / INDEX).read_bytes()
    head = index_head(raw, [read_local_shard(root / file, file) for file in TWO])
    assert head is not None
    rest, named = head
    other = "" if tail else "\n"
    assert holds_as_plain(raw, rest, named, DerivedIndex(rest=rest, tail=tail))
    assert not holds_as_plain(raw, rest, named, DerivedIndex(rest=rest, tail=other))


# keys in the order a state dict gives them (not sorted), the shards first named in file order
UNSORTED = {
    FIRST: {"z.weight": ("F32", (2,)), "b.weight": ("F32", (2,))},
    SECOND: {"a.weight": ("F32", (2,))},
}


def hub_folder(root: Path, weight_map: dict[str, str] | None = None, last: bool = False) -> Path:
    """``UNSORTED`` with its index as huggingface_hub writes it; ``last``: ``metadata`` after
    ``weight_map``, where the head cannot tell ``total_size``."""
    folder(root, UNSORTED)
    if weight_map is None:
        weight_map = {name: file for file, tensors in UNSORTED.items() for name in tensors}
    text = hub_index(weight_map, 24)
    if last:
        document = json.loads(text)
        text = json.dumps({"weight_map": document["weight_map"], **document}, indent=2)
    (root / INDEX).write_text(text)
    return root


def same_reading(root: Path) -> None:
    """Read aside or not, the same checkpoint and the same report."""
    optimistic = open_source(str(root), prove_aside=True)
    plain = open_source(str(root))
    read = settled(optimistic)
    assert read.shards == plain.shards and read.index_text == plain.index_text
    assert read.parsed_index is not None and plain.parsed_index is not None
    assert dict(read.parsed_index.weight_map) == plain.parsed_index.weight_map
    assert read.parsed_index.shard_files == plain.parsed_index.shard_files
    assert read.parsed_index.total_size == plain.parsed_index.total_size
    assert render_json(audit(str(root))) == render_json(audit(plain))


def test_an_unsorted_index_is_parsed_aside_and_gives_what_parsing_it_here_gives(
    tmp_path: Path,
) -> None:
    root = hub_folder(tmp_path)
    optimistic = open_source(str(root), prove_aside=True)
    assert optimistic.pending is not None and settled(optimistic) is optimistic
    same_reading(root)


@pytest.mark.parametrize(
    ("case", "weight_map", "last"),
    [
        # the shards first named in another order than their files'
        ("order", {"a.weight": SECOND, "z.weight": FIRST, "b.weight": FIRST}, False),
        # metadata after weight_map: total_size not in the head
        ("total-size", None, True),
        # a name mapped to the other shard
        ("disagrees", {"z.weight": FIRST, "b.weight": SECOND, "a.weight": SECOND}, False),
    ],
)
def test_an_unsorted_index_read_otherwise_than_assumed_is_parsed_and_read_again(
    tmp_path: Path, case: str, weight_map: dict[str, str] | None, last: bool
) -> None:
    root = hub_folder(tmp_path, weight_map, last)
    optimistic = open_source(str(root), prove_aside=True)
    assert optimistic.pending is not None
    assert settled(optimistic) is not optimistic
    same_reading(root)
