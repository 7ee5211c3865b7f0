"""Coverage-guided fuzzing of everything qarm parses from a checkpoint: header, index, declaration,
manifest. Any input must parse or raise a named QarmError; anything else is a crash.

    python fuzz/fuzz_inputs.py -atheris_runs=20000          # bounded (as in CI)
    python fuzz/fuzz_inputs.py -max_total_time=3600 corpus/ # a longer campaign
"""

from __future__ import annotations

import struct
import sys

import atheris

with atheris.instrument_imports(include=["qarm_audit"]):
    from qarm_audit.declarations import read_declaration
    from qarm_audit.errors import QarmError
    from qarm_audit.sources.header import length_prefix, parse_header
    from qarm_audit.sources.index import parse_index
    from qarm_audit.sources.manifest import parse_manifest


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    kind = fdp.ConsumeIntInRange(0, 3)
    payload = fdp.ConsumeBytes(fdp.remaining_bytes())
    try:
        if kind == 0:
            size = len(payload)
            length = length_prefix(payload[:8], where="fuzz", size=size)
            parse_header(payload[8 : 8 + length], file="fuzz", size=size, header_length=length)
        elif kind == 1:
            parse_index(payload.decode("utf-8", "replace"))
        elif kind == 2:
            read_declaration({"config.json": payload.decode("utf-8", "replace")})
        else:
            parse_manifest(payload.decode("utf-8", "replace"), "fuzz")
    except QarmError:
        pass


SEEDS = [
    b"\x00"
    + struct.pack("<Q", 60)
    + b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}    '
    + b"\x00" * 8,
    b"\x01" + b'{"weight_map": {"a": "model-00001-of-00001.safetensors"}}',
    b"\x02" + b'{"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}',
    b"\x03" + b'{"format": "qarm-manifest/1", "documents": {}, "index": null, "shards": []}',
]


def main() -> None:
    """With no corpus folder given, start from the seeds in a temporary folder."""
    argv = list(sys.argv)
    if not any(not arg.startswith("-") for arg in argv[1:]):
        import tempfile
        from pathlib import Path

        corpus = Path(tempfile.mkdtemp(prefix="qarm-fuzz-"))
        for i, seed in enumerate(SEEDS):
            (corpus / f"seed-{i}").write_bytes(seed)
        argv.append(str(corpus))
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
