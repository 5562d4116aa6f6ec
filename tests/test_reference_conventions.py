"""A reference table may state its counting convention (issue 30: vLLM's drafted-steps AL,
TensorRT-LLM's AL − 1, ...). It is then met with the run's number in that convention, computed from
the run's counts, and the table says so; a convention alcheck does not know is one line, exit 2."""

from __future__ import annotations

import json

import pytest
from conftest import invoke
from test_references import make_ref

from alcheck.errors import AlcheckError
from alcheck.references.tables import reference_from_dict

NGRAM = ["--method", "ngram", "--prompt-lookup-min", "1", "--prompt-lookup-max", "3"]
SWEEP = ["--ks", "3", "--repeats", "1", "--limit", "3", "--max-tokens", "48", "--protocol", "vllm-example"]


def test_the_convention_round_trips_and_is_checked():
    ref = reference_from_dict(make_ref(convention="vllm-drafted"))
    assert ref.convention == "vllm-drafted" and ref.to_dict()["convention"] == "vllm-drafted"
    assert "convention" not in reference_from_dict(make_ref()).to_dict()  # alcheck's: not written
    # AL − 1 lies one lower: 0.4 at K=1 is a possible TensorRT-LLM number, and 2.5 is not
    assert reference_from_dict(make_ref(convention="trtllm", values={"1": 0.4})).value(1) == 0.4
    with pytest.raises(AlcheckError, match=r"values\['1'\] \+ 1 is 3.5"):
        reference_from_dict(make_ref(convention="trtllm", values={"1": 2.5}))
    with pytest.raises(AlcheckError, match="'convention' 'tokens' is not a counting convention"):
        reference_from_dict(make_ref(convention="tokens"))


def test_a_run_meets_a_vllm_drafted_table_on_its_terms(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = tmp_path / "first"
    assert invoke(["run", *NGRAM, *SWEEP, "--reference", "none", "--out", str(first)]).exit_code == 0
    (entry,) = json.loads((first / "run.json").read_text())["summary"]
    printed = round(entry["al_drafted_steps"], 4)  # what vLLM would print for these rows
    assert printed > entry["al_mean"] + 0.05
    tables = tmp_path / "results" / "references"
    tables.mkdir(parents=True)
    for name, convention in (("as-vllm-prints", "vllm-drafted"), ("as-if-alcheck", None)):
        data = make_ref(
            name=name,
            target="alcheck-demo-llama",
            draft="",
            method="ngram",
            max_tokens=48,
            values={"3": printed},
            noise=0.0,
        )
        if convention:
            data["convention"] = convention
        (tables / f"{name}.json").write_text(json.dumps(data))
    out = tmp_path / "second"
    args = ["run", *NGRAM, *SWEEP, "--reference", "as-vllm-prints,as-if-alcheck", "--out", str(out)]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "as-vllm-prints is a vLLM drafted-steps AL" in text
    from alcheck.report.table import comparison_rows

    (row,) = comparison_rows(json.loads((out / "run.json").read_text()))
    met, naive = row["references"]
    assert met["convention"] == "vllm-drafted" and met["diff"] == pytest.approx(0, abs=1e-4)
    assert naive["diff"] == pytest.approx(entry["al_mean"] - printed, abs=1e-4) and naive["diff"] < -0.05
