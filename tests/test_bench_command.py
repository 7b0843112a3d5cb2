"""``groupattn bench``: case selection, one process per case, records and ratios."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from groupattn._command_line import UsageError
from groupattn.bench import (
    PUBLISHED_GSA,
    bench_cases,
    interleaved_best_times,
    run_bench_case,
    select_cases,
)
from groupattn.cli import main
from groupattn.models import list_models


def test_every_family_and_model_has_cases() -> None:
    cases = bench_cases()
    for model in list_models():
        assert f"model_{model}" in cases and f"certify_{model}" in cases
        assert cases[f"model_{model}"].flops
    for layer in PUBLISHED_GSA:
        assert {f"gsa_{layer}_w3", f"gsa_{layer}_w20"} <= set(cases)
    assert select_cases(["gsa"]) == [n for n in cases if n.startswith("gsa_")]
    assert select_cases(["anchoring", "attention"]) == ["anchoring", "orbital_bias"]
    assert select_cases(None) == list(cases)


def test_unknown_cases_are_refused_before_any_work(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="'nope'"):
        select_cases(["nope"])
    started = time.perf_counter()
    assert main(["bench", "gsa", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nope'" in err
    assert time.perf_counter() - started < 5.0
    assert main(["bench", "anchoring", "--repeats", "0"]) == 2


def test_list_names_every_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    for name in bench_cases():
        assert name in out


def test_interleaved_times_rank_two_steps_by_their_cost() -> None:
    fast, slow = interleaved_best_times(lambda: time.sleep(0.005), lambda: time.sleep(0.02), 3)
    assert 0.004 < fast < slow and slow / fast > 2.0


def test_a_published_case_is_a_ratio_to_the_fixed_figures() -> None:
    record = run_bench_case("gsa_lifting_local5_w3", repeats=1)
    subject, published = record["subject"], PUBLISHED_GSA["lifting_local5"]
    assert record["ratios"]["time_forward"] == pytest.approx(
        subject["forward_s"] / published["forward_s"]
    )
    assert record["ratios"]["time_train"] == pytest.approx(
        subject["train_s"] / published["train_s"]
    )
    assert record["speedup_train"] == pytest.approx(1.0 / record["ratios"]["time_train"])
    assert record["reference_side"]["peak_train_mib"] == pytest.approx(
        published["train_gib"] * 1024
    )


def test_a_case_runs_in_its_own_process_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bench.json"
    assert (
        main(["bench", "anchoring", "--repeats", "1", "--threads", "1", "--json", str(path)]) == 0
    )
    assert capsys.readouterr().out.startswith("anchoring")
    payload = json.loads(path.read_text())
    (record,) = payload["cases"]
    assert record["case"] == "anchoring" and record["threads"] == 1
    for side in ("subject", "reference_side"):
        assert record[side]["forward_s"] > 0 and record[side]["train_s"] > 0
    # anchoring scores every phase before it subsamples: never cheaper than the subsample
    assert record["ratios"]["time_forward"] > 1.0


def test_a_model_case_counts_the_arithmetic_of_both_sides() -> None:
    # group_vit's attention returns its trainable bias table from a submodule: the FLOP
    # count must not depend on module hooks (FlopCounterMode's refused it)
    record = run_bench_case("model_group_vit", repeats=1)
    subject, reference = record["subject"], record["reference_side"]
    for side in (subject, reference):
        assert side["flops_forward"] > 0 and side["flops_train"] > side["flops_forward"]
    assert record["ratios"]["flops_forward"] == pytest.approx(
        subject["flops_forward"] / reference["flops_forward"]
    )
    assert record["ratios"]["flops_forward"] > 1.0  # four rotations of every token


def test_thread_counts_are_checked_before_any_work(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "anchoring", "--threads", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--threads" in err
