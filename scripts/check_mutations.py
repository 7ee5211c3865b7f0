"""Delete each guarded branch on purpose and check that a test goes red.

Every refusal class and integrity check has a mutation here. A mutation that leaves the suite
green is a guarantee nothing measures. The tree is restored after each run (and checked).

    python scripts/check_mutations.py            # all mutations
    python scripts/check_mutations.py no-arm     # those whose name contains "no-arm"
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "qarm_audit"

# fmt: off
MUTATIONS: list[tuple[str, str, str, str]] = [
    # (name, file, original text, mutated text)
    ("pinned-sha-answered-with-another", "sources/hub/listing.py",
     "    if pinned and sha != ctx.revision.lower():",
     "    if False:"),
    ("offline-header-against-snapshot", "sources/hub/cache.py",
     "            _check_against_snapshot(ctx.repo, sha, file, data)\n",
     "\n"),
    ("index-disagrees-header-names", "sources/integrity.py",
     "        if unlisted:\n",
     "        if False:\n"),
    ("weights-unread", "commands/audit.py",
     "    if tensors == 0:",
     "    if False:"),
    ("second-layout", "commands/audit.py",
     "    if single is not None:",
     "    if False:"),
    ("operand-unexpected", "check/crosscheck.py",
     "    out.extend(_strays(info, scheme, spec))\n",
     "\n"),
    ("fused-decided-once", "resolve/resolver.py",
     "            decided = dict.fromkeys(own, whole)",
     "            decided = own"),
    ("experts-disagree", "resolve/resolver.py",
     "    if len(buckets) < 2:\n        return None",
     "    if True:\n        return None"),
    ("layer-override", "resolve/resolver.py",
     "        return layer_override(info) or membership",
     "        return membership"),
    ("unclassified-operand", "check/crosscheck.py",
     "if classify_operand(operand) is OperandKind.UNCLASSIFIED:",
     "if False and classify_operand(operand) is OperandKind.UNCLASSIFIED:"),
    ("unquantized-ships-quantized", "check/crosscheck.py",
     "    if scheme is None:\n        if spelling.quantized:",
     "    if scheme is None:\n        if False:"),
    ("quantized-ships-unquantized", "check/crosscheck.py",
     "                \"quantized-ships-unquantized\",",
     "                \"quantized-ships-unquantized\" if False else \"input-scale-unread\","),
    ("container-skip", "check/crosscheck.py",
     "if membership.how in INHERITED and info.kind != \"linear\":",
     "if False:"),
    ("spelling-mismatch-family", "check/crosscheck.py",
     "if spelling.family not in COMPATIBLE.get(scheme.family, frozenset()):",
     "if False:"),
    ("spelling-mismatch-producer", "check/crosscheck.py",
     "        spelling.producer\n        and spelling.producer not in",
     "        False\n        and spelling.producer not in"),
    ("operand-missing", "check/crosscheck.py",
     "            if operand.required:",
     "            if False:"),
    ("operand-dtype", "check/crosscheck.py",
     "if operand.dtypes is not None and entry.dtype not in operand.dtypes:",
     "if False:"),
    ("operand-shape", "check/crosscheck.py",
     "if dims is not None and not _shape_ok(operand.shape, entry, *dims, scheme.group_size):",
     "if False:"),
    ("w4a16-accepts-input-scale", "check/crosscheck.py",
     "Operand(\"input_scale\", F32, \"[]\", required=static),\n            ]\n        if scheme.family == \"mxfp8\":",
     "Operand(\"input_scale\", F32, \"[]\", required=True),\n            ]\n        if scheme.family == \"mxfp8\":"),
    ("no-arm", "engines/arms.py",
     "                if decision.executed != \"none\" or not outcome.total:\n                    continue",
     "                if True:\n                    continue"),
    ("declared-arm-differs", "engines/arms.py",
     "if decision.executed not in (\"none\", UNKNOWN_ARM, decision.declared):",
     "if False:"),
    ("no-arm-on-some-gpus", "engines/arms.py",
     "if decision.executed == \"none\" and decider.gpu is None and label is not None:",
     "if False:"),
    ("arm-per-gpu-range", "engines/arms.py",
     "            else tuple(STANDARD_GPUS)\n",
     "            else (None,)\n"),
    ("declared-view-drops-weight-only-scales", "engines/arms.py",
     "    names = {n for n in shipped if n not in DECIDING_OPERANDS}\n",
     "    names = set(shipped)\n"),
    ("routing-moves", "engines/arms.py",
     "            if a != b:\n",
     "            if False:\n"),
    ("load-error-quote", "engines/arms.py",
     "        if quote.text:\n",
     "        if False:\n"),
    ("profile-rule-conditions", "engines/profile.py",
     "        rule.declared_algo_not is None or algo not in rule.declared_algo_not,\n",
     "        True,\n"),
    ("declared-module-missing", "commands/audit.py",
     "            for key in resolution.unmatched\n",
     "            for key in ()\n"),
    ("declaration-unreadable", "commands/audit.py",
     "    if declaration.family == \"unreadable\":",
     "    if False:"),
    ("kv-scales-missing", "commands/audit.py",
     "if declaration.kv is not None and shipped == 0:",
     "if False:"),
    ("kv-not-a-weight-spelling", "modules/operands.py",
     "    if operand in KV_OPERANDS:\n        return OperandKind.KV",
     "    if operand in KV_OPERANDS:\n        return OperandKind.QUANT"),
    ("fused-disagree-modelopt", "resolve/resolver.py",
     "            if len(buckets) > 1:\n                detail",
     "            if False:\n                detail"),
    ("fused-disagree-compressed-tensors", "resolve/resolver.py",
     "        if len({m.bucket for m in own.values()}) > 1:",
     "        if False:"),
    ("fused-disagree-exclude", "resolve/resolver.py",
     "            elif listed:",
     "            elif False:"),
    ("exclude-substring-stage", "resolve/resolver.py",
     "        if substring is not None:\n            return \"substring\"",
     "        if False:\n            return \"substring\""),
    ("exclude-wildcard-stage", "resolve/resolver.py",
     "        if wildcard is not None:\n            return \"wildcard\", wildcard",
     "        if False:\n            return \"wildcard\", wildcard"),
    ("exclude-experts-rule", "resolve/resolver.py",
     "                if engine_name in entry:",
     "                if False:"),
    ("mixed-prefix-scan", "resolve/resolver.py",
     "            key = self._first_child(candidate)\n            if key is not None:",
     "            key = None\n            if key is not None:"),
    ("ct-regex-match-not-search", "resolve/matchers.py",
     "        for number in sorted(self.index.candidates(name)):\n            if self.compiled[number].match(name):\n                return number",
     "        for number in range(len(self.compiled)):\n            if self.compiled[number].search(name):\n                return number"),
    ("regex-prefix-index-too-narrow", "resolve/matchers.py",
     "        if after in (\"*\", \"?\", \"{\"):\n            break\n        out.append(literal)",
     "        out.append(literal)"),
    ("glob-prefix-index-ignores-question-mark", "resolve/matchers.py",
     "        if char in \"*?[\":",
     "        if char in \"*[\":"),
    ("integrity-duplicate-names", "sources/integrity.py",
     "                if previous is not None:",
     "                if False:"),
    ("integrity-index-to-header", "sources/integrity.py",
     "        if wrong:",
     "        if False:"),
    ("integrity-header-to-index", "sources/integrity.py",
     "        if unlisted:",
     "        if False:"),
    ("index-rule-only-when-byte-identical", "sources/index.py",
     "        if render_derived(derived, owner) == text:",
     "        if True:"),
    ("index-rule-keeps-metadata", "sources/index.py",
     "        return _index(checkpoint.derived_index.rest, owner, INDEX_FILE)",
     "        return _index({}, owner, INDEX_FILE)"),
    ("shape-overflow-header", "sources/header.py",
     "    if total_bits >= BITS_LIMIT:",
     "    if False:"),
    ("shape-overflow-manifest", "sources/manifest.py",
     "        if numel * bits >= BITS_LIMIT or numel * bits % 8:",
     "        if numel * bits % 8:"),
    ("dangling-symlink-is-not-absent", "sources/local.py",
     "        if path.is_symlink():\n            raise FetchError(",
     "        if False:\n            raise FetchError("),
    ("regex-python-only-unsafe-refused", "resolve/matchers.py",
     "            if planned.re2 is None and not planned.python_safe:",
     "            if False:"),
    ("regex-unplain-name-unsafe-refused", "resolve/matchers.py",
     "        if not planned.python_safe:\n            shown",
     "        if False:\n            shown"),
    ("regex-dollar-before-final-newline", "resolve/regex_plan.py",
     '        if self.newline_sensitive and "\\n" in name:',
     "        if False:"),
    ("regex-unicode-classes-to-python", "resolve/matchers.py",
     "        if name.isascii() and name.isprintable():\n            plain",
     "        if True:\n            plain"),
    ("header-duplicate-key-proof", "sources/header.py",
     '    if raw.count(b":") != keys + colons:',
     "    if False:"),
    ("document-duplicate-key-proof", "sources/header.py",
     "    return colons == keys + sum(\"\".join(part).count(\":\") for part in texts)",
     "    return True"),
    ("crosscheck-names-every-refused-member", "check/crosscheck.py",
     "        for member in group.members:\n            spellings[member.name], refusals",
     "        for member in group.members[:1]:\n            spellings[member.name], refusals"),
    ("alike-key-keeps-how", "check/alike.py",
     "key = (layout_key(info), info.kind, membership.bucket, membership.how)",
     "key = (layout_key(info), info.kind, membership.bucket)"),
    ("alike-key-keeps-layout", "check/alike.py",
     "key = (layout_key(info), info.kind, membership.bucket, membership.how)",
     "key = (info.kind, membership.bucket, membership.how)"),
    ("header-bulk-contiguity", "sources/header.py",
     "        and begins[1:] == ends[:-1]\n",
     "        and True\n"),
    ("header-bulk-sizes", "sources/header.py",
     "        and list(map(sub, ends, begins)) == [sizes[e.dtype, e.shape] for e in ordered]",
     "        and True"),
    ("header-bulk-dims-are-ints", "sources/header.py",
     "    return set(map(type, items)) <= _INT and (",
     "    return True and ("),
    ("header-overlap", "sources/header.py",
     "        if entry.begin < cursor:",
     "        if False:"),
    ("header-size", "sources/header.py",
     "        if entry.end - entry.begin != nbytes:",
     "        if False:"),
    ("buckets-sum", "commands/audit.py",
     "            tensors[KV_CACHE] += kv * n\n",
     "            tensors[KV_CACHE] += 0\n"),
    # --probe-scalars
    ("probe-zero", "check/probe.py",
     "    if any(v == 0 for v in values):\n        return \"zero\"",
     "    if False:\n        return \"zero\""),
    ("probe-negative", "check/probe.py",
     "    if any(v < 0 for v in values):",
     "    if False:"),
    ("probe-nonfinite", "check/probe.py",
     "    if any(math.isnan(v) or math.isinf(v) for v in values):",
     "    if False:"),
    ("probe-expert-mask", "check/probe.py",
     "if any(_status(values[c.entry.name]) == \"ok\" for c in group):",
     "if True:"),
    ("probe-fused-partners", "check/probe.py",
     "if len(members) < 2 or len({values[m.entry.name][0] for m in members}) == 1:",
     "if True:"),
    ("probe-bound", "check/probe.py",
     "            if numel > BOUND:",
     "            if False:"),
    ("probe-per-tensor-weight-scale", "check/probe.py",
     "if operand in PER_TENSOR_ONLY and numel != 1:",
     "if False:"),
    ("probe-only-with-the-flag", "commands/audit.py",
     "    if probe_scalars:\n        probe, probe_findings",
     "    if True:\n        probe, probe_findings"),
    ("sniff-stops-at-the-prefix", "sources/__init__.py",
     "            if path.suffix != \".safetensors\" or",
     "            if True or"),
    # explain's trace, held to the resolver
    ("trace-target-precedence", "commands/explain.py",
     "    hits = sorted(\n",
     "    hits = list(\n"),
    ("trace-fused-shards-all-listed", "commands/explain.py",
     "            if listed and len(listed) == len(members):",
     "            if listed:"),
    ("trace-experts-exclude", "commands/explain.py",
     "entry = next((e for e in ex.experts if engine in e), None)",
     "entry = None"),
    # diff
    ("diff-dtype-shape", "commands/diff.py",
     "if (ea.dtype, ea.shape) != (eb.dtype, eb.shape)",
     "if False"),
    ("diff-layout-moves", "commands/diff.py",
     "        if fa != fb:\n            moved.append",
     "        if False:\n            moved.append"),
    ("diff-identical-counts-declarations", "commands/diff.py",
     "changed or modules or config)",
     "changed)"),
]
# fmt: on


def digest() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(SRC.rglob("*.py")))).hexdigest()


def main() -> int:
    wanted = sys.argv[1:]
    before = digest()
    survived = []
    for name, file, original, mutated in MUTATIONS:
        if wanted and not any(w in name for w in wanted):
            continue
        path = SRC / file
        text = path.read_text()
        count = text.count(original)
        if count != 1:
            print(f"{name}: NOT APPLIED (pattern found {count} times)")
            survived.append(name)
            continue
        path.write_text(text.replace(original, mutated))
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-x",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    str(ROOT / "tests"),
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
        finally:
            path.write_text(text)
        red = done.returncode != 0
        failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
        print(f"{name}: {'red' if red else 'GREEN (survived)'} {failed[:1]}")
        if not red:
            survived.append(name)
    assert digest() == before, "tree not restored"
    print(f"{len(survived)} survived: {survived}" if survived else "every mutation went red")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
