"""A document read only where it is looked at (``DocumentFile``): every length, slice, search
and end it serves is what the bytes read whole give, across its windows' edges; and it is
refused where reading it whole is."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qarm_audit.errors import FetchError, SourceSpecError
from qarm_audit.sources.document_file import DocumentFile, read_document

# few distinct bytes, so that what is searched for is often there, and across a window's edge
_BYTES = st.binary(max_size=300).map(lambda b: bytes(c % 4 + 0x61 for c in b))
_SUBS = st.binary(max_size=6).map(lambda b: bytes(c % 4 + 0x61 for c in b))
_BOUND = st.integers(min_value=0, max_value=320)


@settings(max_examples=300, deadline=None)
@given(
    data=_BYTES,
    sub=_SUBS,
    start=_BOUND,
    end=st.none() | _BOUND,
    window=st.integers(min_value=1, max_value=40),
)
def test_a_document_read_in_windows_serves_what_its_bytes_give(
    tmp_path_factory: pytest.TempPathFactory,
    data: bytes,
    sub: bytes,
    start: int,
    end: int | None,
    window: int,
) -> None:
    path = tmp_path_factory.mktemp("doc") / "index.json"
    path.write_bytes(data)
    document = DocumentFile(path, "index.json", window=window)
    assert len(document) == len(data)
    if end is None:
        assert document.find(sub, start) == data.find(sub, start)
        assert document.endswith(sub, start) == data.endswith(sub, start)
        assert document[start:] == data[start:]
    else:
        assert document.find(sub, start, end) == data.find(sub, start, end)
        assert document.endswith(sub, start, end) == data.endswith(sub, start, end)
        assert document[start:end] == data[start:end]
    assert document.whole() == data


@pytest.mark.parametrize("window", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("sub", [b"a", b"ab", b"abc", b"abcdef"])
def test_a_match_is_found_wherever_it_lies_against_the_windows_edges(
    tmp_path: Path, window: int, sub: bytes
) -> None:
    """Each place a match can take against the windows a search reads (growing from
    ``window``): before, across and after each edge, and longer than the first window."""
    for place in range(4 * window + len(sub)):
        data = b"x" * place + sub + b"x" * window
        path = tmp_path / f"index-{place}.json"
        path.write_bytes(data)
        document = DocumentFile(path, "index.json", window=window)
        assert document.find(sub) == place
        assert document.find(sub, 1, len(data)) == data.find(sub, 1, len(data))


def test_a_document_above_the_cap_is_refused_where_reading_it_whole_is(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    path.write_bytes(b"{}" * 10)
    with pytest.raises(SourceSpecError) as whole:
        read_document(path, "index.json", cap=19)
    with pytest.raises(SourceSpecError) as windows:
        DocumentFile(path, "index.json", cap=19)
    assert str(windows.value) == str(whole.value)


def test_a_document_that_cannot_be_read_is_refused_where_reading_it_whole_is(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index.json"
    path.mkdir()  # a name that is there and reads as no file
    with pytest.raises(FetchError) as whole:
        read_document(path, "index.json")
    with pytest.raises(FetchError) as windows:
        DocumentFile(path, "index.json")
    assert type(windows.value) is type(whole.value)
    assert "index.json" in str(windows.value)


def test_a_document_that_goes_away_is_refused_by_name_when_read_again(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    path.write_bytes(b"x" * 100)
    document = DocumentFile(path, "index.json", window=10)
    path.unlink()
    assert document[0:10] == b"x" * 10  # the head, read when it was opened
    with pytest.raises(FetchError, match=r"index\.json"):
        document.find(b"y")
    with pytest.raises(FetchError, match=r"index\.json"):
        document.whole()
