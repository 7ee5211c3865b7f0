"""Declarations: both families, every real-world file, precedence and disagreements."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REALWORLD, llama, modelopt_file, nvfp4_modelopt, sized, write_checkpoint
from qarm_audit import audit
from qarm_audit.declarations import read_declaration

REALWORLD_FILES = sorted(p for p in REALWORLD.glob("*/*.json"))

EXPECTED = {
    "aic-deepseek-v3-0324-nvfp4": ("modelopt", "NVFP4"),
    "aic-deepseek-v4-flash-nvfp4": ("modelopt", "MIXED_PRECISION"),
    "aic-deepseek-v4-pro-nvfp4": ("modelopt", "MIXED_PRECISION"),
    "aic-glm5-nvfp4": ("modelopt", "NVFP4"),
    "aic-kimi-k2.5-nvfp4-named": ("compressed-tensors", "pack-quantized"),
    "aic-poolside-laguna-xs2-fp8": ("compressed-tensors", "float-quantized"),
    "aic-qwen3-30b-a3b-nvfp4": ("modelopt", "NVFP4"),
    "aic-qwen3-32b-nvfp4": ("modelopt", "NVFP4"),
    "aic-redhat-deepseek-v4-flash-nvfp4-fp8": ("compressed-tensors", "mixed-precision"),
    "aic-rh-glm-5.3-nvfp4-modelopt-in-config": ("modelopt", "NVFP4"),
    "aic-sgl-deepseek-v4-flash-fp8-native": ("fp8", "fp8"),
    "ct-example-int4-w4a16": ("compressed-tensors", None),
    "ct-example-int8-w8a8": ("compressed-tensors", None),
    "ct-example-mixed-precision-fp8-nvfp4": ("compressed-tensors", None),
    "llmc-example-fakequant-int8": ("compressed-tensors", "fakequant"),
    "llmc-stories42m-pruned24-sparse-only": ("none", None),
    "llmc-tinyllama-fp8-kv-legacy-compression-config": ("compressed-tensors", "float-quantized"),
    "llmc-tinyllama-fp8-static-legacy-compression-config": (
        "compressed-tensors",
        "float-quantized",
    ),
    "nvfp4doctor-qwen3-8b-nvfp4-headers": ("absent", None),
    "trtllm-deepseek-r1-nvfp4": ("modelopt", "NVFP4"),
}


def test_expected_table_covers_every_realworld_file() -> None:
    assert sorted(EXPECTED) == sorted(p.parent.name for p in REALWORLD_FILES)


@pytest.mark.parametrize("path", REALWORLD_FILES, ids=lambda p: p.parent.name)
def test_every_realworld_declaration_parses_or_is_refused_by_name(path: Path, run) -> None:
    family, algo = EXPECTED[path.parent.name]
    result = run("audit", path, "-f", "json")
    report = json.loads(result.stdout)
    assert report["declaration"]["family"] == family
    assert report["declaration"]["algo"] == algo
    if family in ("unreadable", "absent"):
        assert result.exit_code == 1
        assert [r["code"] for r in report["refusals"]] == ["declaration-unreadable"]
    elif path.parent.name in (
        "llmc-stories42m-pruned24-sparse-only",
        "llmc-tinyllama-fp8-kv-legacy-compression-config",
    ):
        # vLLM refuses any sparsity_config (test_vllm_refuses_any_sparsity_config), and a
        # kv_cache_scheme that does not write symmetric true (tests/test_kv_declaration.py)
        assert result.exit_code == 1
        assert [r["code"] for r in report["refusals"]] == ["engine-refuses-declaration"]
    elif path.parent.name in (
        "ct-example-int4-w4a16",
        "ct-example-int8-w8a8",
        "llmc-example-fakequant-int8",
    ):
        # example recipes, not checkpoints: groups vLLM's _get_scheme_from_parts finds no scheme
        # for (no format at all; the obsolete fakequant format), tests/test_vllm_ct_answers.py
        assert result.exit_code == 1
        assert {r["code"] for r in report["refusals"]} == {"no-arm"}
        assert (
            "No compressed-tensors compatible scheme was found" in report["refusals"][0]["message"]
        )
    else:
        assert result.exit_code == 0, report["refusals"]
        markdown = run("audit", path, "-f", "markdown").stdout
        for scheme in report["declaration"]["schemes"]:
            assert scheme["name"] in markdown


def test_lone_declaration_prints_its_rules(run) -> None:
    path = REALWORLD / "aic-deepseek-v3-0324-nvfp4" / "hf_quant_config.json"
    report = json.loads(run("audit", path, "-f", "json").stdout)
    assert report["declaration"]["rules"] == {"exclude_modules": 245}
    assert report["totals"]["tensors"] == 0
    assert "exclude_modules 245" in run("audit", path, "-f", "markdown").stdout


def test_kimi_declaration_under_text_config_is_int4_not_nvfp4() -> None:
    text = (REALWORLD / "aic-kimi-k2.5-nvfp4-named" / "config.json").read_text()
    d = read_declaration({"config.json": text})
    assert d.source == "config.json: text_config.quantization_config"
    (scheme,) = d.schemes.values()
    assert (scheme.family, scheme.weight_bits, scheme.weight_only) == ("int", 4, True)


def test_modelopt_kv_scheme_string_and_dict_are_both_read() -> None:
    for kv, expected in (
        ("NVFP4", "NVFP4"),
        ({"dynamic": False, "num_bits": 8, "type": "float"}, "FP8"),
    ):
        doc = {
            "quantization_config": {
                "quant_method": "modelopt",
                "quant_algo": "NVFP4",
                "kv_cache_scheme": kv,
                "ignore": [],
            }
        }
        assert read_declaration({"config.json": json.dumps(doc)}).kv.algo == expected


def inline(algo: str, **extra: object) -> dict:
    return {
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": algo,
            "producer": {"name": "modelopt"},
            **extra,
        }
    }


def test_config_json_wins_and_every_disagreement_is_reported() -> None:
    config = inline(
        "NVFP4", ignore=["lm_head", "model.layers.0*"], kv_cache_scheme="NVFP4", group_size=16
    )
    file = modelopt_file("W4A16_NVFP4", ["lm_head"], kv="FP8", group_size=32)
    d = read_declaration(
        {"config.json": json.dumps(config), "hf_quant_config.json": json.dumps(file)}
    )
    assert d.source == "config.json: quantization_config"
    assert d.algo == "NVFP4"
    messages = [f.message for f in d.findings if f.code == "declaration-disagreement"]
    assert [m.split(":")[0] for m in messages] == [
        "quant_algo",
        "kv_cache_quant_algo",
        "group_size",
        "exclude set",
    ]


def test_agreeing_declarations_report_nothing() -> None:
    config = inline(
        "NVFP4", ignore=["lm_head"], kv_cache_scheme={"num_bits": 8, "type": "float"}, group_size=16
    )
    file = modelopt_file("NVFP4", ["lm_head"], kv="FP8")
    d = read_declaration(
        {"config.json": json.dumps(config), "hf_quant_config.json": json.dumps(file)}
    )
    assert d.findings == ()


def test_mixed_without_quantized_layers_in_config_falls_through_to_the_file() -> None:
    layers = {"model.layers.0.mlp.down_proj": {"quant_algo": "FP8"}}
    d = read_declaration(
        {
            "config.json": json.dumps(inline("MIXED_PRECISION")),
            "hf_quant_config.json": json.dumps(modelopt_file("MIXED_PRECISION", layers=layers)),
        }
    )
    assert d.source == "hf_quant_config.json"
    assert d.modelopt is not None and d.modelopt.layers == {"model.layers.0.mlp.down_proj": "FP8"}


def test_per_algorithm_layer_counts_are_compared() -> None:
    a = {f"m.{i}": {"quant_algo": "FP8"} for i in range(3)}
    b = {f"m.{i}": {"quant_algo": "FP8" if i else "NVFP4"} for i in range(3)}
    d = read_declaration(
        {
            "config.json": json.dumps(inline("MIXED_PRECISION", quantized_layers=a)),
            "hf_quant_config.json": json.dumps(modelopt_file("MIXED_PRECISION", layers=b)),
        }
    )
    assert any("quantized_layers per algorithm" in f.message for f in d.findings)


def test_stale_modelopt_file_beside_a_compressed_tensors_config() -> None:
    config = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "g": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 4,
                        "type": "float",
                        "strategy": "tensor_group",
                        "group_size": 16,
                    },
                }
            },
        }
    }
    d = read_declaration(
        {
            "config.json": json.dumps(config),
            "hf_quant_config.json": json.dumps(modelopt_file("NVFP4")),
        }
    )
    assert d.family == "compressed-tensors"
    assert [f.code for f in d.findings] == ["stale-declaration"]


def test_legacy_compression_config_and_lowercase_algo() -> None:
    d = read_declaration(
        {
            "config.json": json.dumps(
                {
                    "compression_config": {
                        "quant_method": "compressed-tensors",
                        "config_groups": {
                            "group_0": {
                                "targets": ["Linear"],
                                "weights": {"num_bits": 8, "type": "float"},
                            }
                        },
                    }
                }
            )
        }
    )
    assert d.source == "config.json: compression_config"
    lower = read_declaration({"hf_quant_config.json": json.dumps(modelopt_file("fp8_pb_wo"))})
    assert [f.code for f in lower.findings] == ["lowercase-algo"]
    assert lower.schemes["fp8_pb_wo"].family == "fp8"


def test_unknown_keys_are_kept_and_listed() -> None:
    doc = inline("NVFP4", ignore=[], brand_new_key=1)
    d = read_declaration({"config.json": json.dumps(doc)})
    assert [f.code for f in d.findings] == ["unknown-keys"]
    assert "brand_new_key" in d.findings[0].message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        (
            '{"quantization_config": {"quant_method": "modelopt", "quant_algo": ["x"]}}',
            "quant_algo",
        ),
        ('{"quantization_config": 3}', "is not a JSON object"),
        ('{"a": 1, "a": 2}', "duplicate key"),
    ],
    ids=["json", "type", "shape", "duplicate"],
)
def test_malformed_declaration_is_a_named_error_and_exit_2(
    tmp_path: Path, run, text: str, message: str
) -> None:
    path = write_checkpoint(
        tmp_path / "c",
        {"model.safetensors": llama(spell=lambda m, o, i: nvfp4_modelopt(m, o, i))},
        {"config.json": text},
    )
    result = run("audit", path)
    assert result.exit_code == 2, result.stdout
    assert message in result.stderr and "config.json" in result.stderr
    assert "header" not in result.stderr  # a declaration is no shard header


def test_sparsity_only_checkpoint_is_not_quantized(tmp_path: Path) -> None:
    text = (REALWORLD / "llmc-stories42m-pruned24-sparse-only" / "config.json").read_text()
    config = sized(json.loads(text), llama())
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": llama()}, {"config.json": config})
    report = audit(str(path), engine="sglang")
    assert report.declaration.family == "none"
    assert "sparsity only" in (report.declaration.reason or "")
    assert report.refusals == []


@pytest.mark.parametrize("release", ["0.30.0", "0.33.0"])
def test_vllm_refuses_any_sparsity_config(tmp_path: Path, release: str) -> None:
    """vLLM raises at config parse for a sparsity_config with targets, quantized or not
    (compressed_tensors.py _parse_sparsity_config); SGLang still reads it."""
    config = sized(
        json.loads(
            (REALWORLD / "llmc-stories42m-pruned24-sparse-only" / "config.json").read_text()
        ),
        llama(),
    )
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": llama()}, {"config.json": config})
    report = audit(str(path), engine=f"vllm=={release}")
    assert [r.code for r in report.refusals] == ["engine-refuses-declaration"]
    assert "Sparsity support has been removed" in report.refusals[0].message
    untargeted = json.loads(json.dumps(config))
    untargeted["quantization_config"]["sparsity_config"]["targets"] = []
    path = write_checkpoint(
        tmp_path / "u", {"model.safetensors": llama()}, {"config.json": untargeted}
    )
    assert audit(str(path), engine=f"vllm=={release}").refusals == []


@pytest.mark.parametrize("size", [0, -4, 16.0, True, "16"])
def test_a_group_size_that_is_no_positive_integer_is_refused_by_name(size: object) -> None:
    from qarm_audit.errors import DeclarationError

    modelopt = {"quantization": {"quant_algo": "NVFP4", "group_size": size}}
    with pytest.raises(DeclarationError, match="group_size"):
        read_declaration({"hf_quant_config.json": json.dumps(modelopt)})
    weights = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": size}
    block = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"targets": ["Linear"], "weights": weights}},
    }
    with pytest.raises(DeclarationError, match="group_size"):
        read_declaration({"config.json": json.dumps({"quantization_config": block})})


def test_compressed_tensors_keeps_minus_one_for_per_channel() -> None:
    weights = {"num_bits": 8, "type": "int", "strategy": "channel", "group_size": -1}
    block = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"targets": ["Linear"], "weights": weights}},
    }
    assert read_declaration({"config.json": json.dumps({"quantization_config": block})}).schemes


def test_a_group_size_only_the_file_states_is_used_and_a_dispute_still_reported() -> None:
    inline = {"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}
    quiet = {"quantization": {"quant_algo": "NVFP4", "group_size": 32}}
    declaration = read_declaration(
        {"config.json": json.dumps(inline), "hf_quant_config.json": json.dumps(quiet)}
    )
    assert declaration.schemes["NVFP4"].group_size == 32
    assert "declaration-disagreement" not in [f.code for f in declaration.findings]
    inline["quantization_config"]["group_size"] = 16
    declaration = read_declaration(
        {"config.json": json.dumps(inline), "hf_quant_config.json": json.dumps(quiet)}
    )
    assert declaration.schemes["NVFP4"].group_size == 16  # config.json wins, as in the engines
    assert "declaration-disagreement" in [f.code for f in declaration.findings]


@pytest.mark.parametrize(
    "values",
    [
        [16, 16.0],
        [16.0, 16],
        [1, True],
        [True, 1],
        [16, "16"],
        [None, 16],
    ],
)
def test_quantized_layers_read_once_per_entry_give_each_entry_its_own_reading(
    values: list[object],
) -> None:
    """A MoE map is validated once per distinct entry; entries equal in Python but not in JSON
    (16 and 16.0, 1 and true) are never taken for one another."""
    from pydantic import TypeAdapter, ValidationError

    from qarm_audit.declarations.modelopt import LayerEntry, LayerMap

    raw = {f"m.{i}": {"quant_algo": "NVFP4", "group_size": v} for i, v in enumerate(values)}

    def alone(entry: object) -> object:
        try:
            return LayerEntry.model_validate(entry).model_dump()
        except ValidationError as exc:
            return ("error", exc.errors()[0]["type"])

    expected = {key: alone(entry) for key, entry in raw.items()}
    try:
        read = TypeAdapter(LayerMap).validate_python(raw)
        got: dict[str, object] = {key: entry.model_dump() for key, entry in read.items()}
    except ValidationError:
        assert any(isinstance(v, tuple) for v in expected.values())
        return
    assert got == expected


_ENTRY_VALUES = st.one_of(
    st.sampled_from(["NVFP4", "FP8", "W4A16_AWQ"]),
    st.sampled_from([16, 32, 128, 0, True, False, 16.0]),
    st.none(),
    st.lists(st.one_of(st.integers(0, 2), st.booleans()), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(
    pool=st.lists(
        st.fixed_dictionaries(
            {"quant_algo": st.sampled_from(["NVFP4", "FP8", 4])},
            optional={
                "group_size": _ENTRY_VALUES,
                "has_zero_point": _ENTRY_VALUES,
                "extra": _ENTRY_VALUES,
                "more": _ENTRY_VALUES,
            },
        ),
        min_size=1,
        max_size=4,
    ),
    picks=st.lists(st.integers(0, 3), min_size=1, max_size=30),
    reorder=st.booleans(),
)
def test_quantized_layers_read_once_per_entry_read_as_each_alone(
    pool: list[dict[str, Any]], picks: list[int], reorder: bool
) -> None:
    """Whatever the map, reading each distinct entry once gives what reading every entry alone
    gives: the same fields, the same unknown keys in the same order, or an error."""
    from pydantic import TypeAdapter, ValidationError

    from qarm_audit.declarations.modelopt import LayerEntry, LayerMap

    entries = [pool[i % len(pool)] for i in picks]
    if reorder:  # equal entries written with their keys in another order
        entries = [dict(reversed(e.items())) if i % 2 else dict(e) for i, e in enumerate(entries)]
    raw = {f"m.{i}": entry for i, entry in enumerate(entries)}

    def alone(entry: dict[str, Any]) -> object:
        read = LayerEntry.model_validate(entry)
        return read.model_dump(), list(read.model_extra or {})

    try:
        expected = {key: alone(entry) for key, entry in raw.items()}
    except ValidationError:
        with pytest.raises(ValidationError):
            TypeAdapter(LayerMap).validate_python(raw)
        return
    read = TypeAdapter(LayerMap).validate_python(raw)
    assert list(read) == list(raw)
    got = {key: (e.model_dump(), list(e.model_extra or {})) for key, e in read.items()}
    assert got == expected


@pytest.mark.parametrize("size", [0, -4, 16.0, True, "16"])
def test_a_modelopt_group_size_is_checked_in_config_groups_and_in_either_file(
    size: object,
) -> None:
    """ModelOpt's config.json converter writes the group size in config_groups only: a 0 there
    was skipped (the default 16 was used, and the checkpoint audited clean), and so was a 0 in
    an hf_quant_config.json beside a config.json declaration (the other file of the pair)."""
    from qarm_audit.errors import DeclarationError

    def groups(value: object) -> dict[str, Any]:
        weights = {"num_bits": 4, "type": "float", "group_size": value}
        return {"group_0": {"targets": ["Linear"], "weights": weights}}

    inline = {"quant_method": "modelopt", "quant_algo": "NVFP4", "config_groups": groups(size)}
    with pytest.raises(DeclarationError, match=r"config_groups\.group_0\.weights\.group_size"):
        read_declaration({"config.json": json.dumps({"quantization_config": inline})})
    good = {"quant_method": "modelopt", "quant_algo": "NVFP4", "config_groups": groups(16)}
    bad_file = {"quantization": {"quant_algo": "NVFP4", "group_size": size}}
    with pytest.raises(DeclarationError, match=r"hf_quant_config\.json: quantization\.group_size"):
        read_declaration(
            {
                "config.json": json.dumps({"quantization_config": good}),
                "hf_quant_config.json": json.dumps(bad_file),
            }
        )
    silent = {"quant_method": "modelopt", "quant_algo": "NVFP4"}  # takes the file's
    with pytest.raises(DeclarationError, match=r"hf_quant_config\.json: quantization\.group_size"):
        read_declaration(
            {
                "config.json": json.dumps({"quantization_config": silent}),
                "hf_quant_config.json": json.dumps(bad_file),
            }
        )
    assert (
        read_declaration({"config.json": json.dumps({"quantization_config": good})})
        .schemes["NVFP4"]
        .group_size
        == 16
    )


def test_a_mixed_map_makes_one_scheme_per_algorithm_from_its_first_entry() -> None:
    layers = {
        "model.layers.0.mlp.down_proj": {"quant_algo": "fp8_pb_wo"},
        "model.layers.0.mlp.up_proj": {"quant_algo": "NVFP4", "group_size": 16},
        "model.layers.1.mlp.down_proj": {"quant_algo": "fp8_pb_wo"},
        "model.layers.1.mlp.up_proj": {"quant_algo": "NVFP4", "group_size": 32},
    }
    doc = {"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": layers}}
    d = read_declaration({"hf_quant_config.json": json.dumps(doc)})
    assert list(d.schemes) == ["fp8_pb_wo", "NVFP4"]
    assert d.schemes["NVFP4"].group_size == 16
    assert d.modelopt is not None and d.modelopt.layers == {
        module: entry["quant_algo"] for module, entry in layers.items()
    }
    [note] = [f for f in d.findings if f.code == "lowercase-algo"]
    assert "'model.layers.0.mlp.down_proj'" in note.message
