"""The load parser: the contract's shape, SGLang's native /v1/loads (with and without aggregate),
its legacy /get_load list, and vLLM's Prometheus gauges."""

import pytest

from engine_plugins.client import LoadParseError, parse_loads, parse_vllm_metrics


def test_contract_shape_keeps_in_flight_pause_version_and_engine():
    load = parse_loads({
        "loads": [{"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 2, "num_total_reqs": 5}],
        "aggregate": {"total_running_reqs": 3, "total_waiting_reqs": 2, "total_reqs": 5},
        "in_flight": 5, "paused": False, "weight_version": "v7", "engine": "vllm",
    })
    assert (load.running, load.waiting, load.total, load.source) == (3, 2, 5, "contract")
    assert (load.in_flight, load.paused, load.weight_version, load.engine) == (5, False, "v7", "vllm")
    assert not load.idle


def test_sglang_native_per_rank_list_without_aggregate_is_summed():
    # SGLang 0.5.23 (v1_loads.py:96-150) sends no aggregate.
    load = parse_loads({"version": "0.5.23", "loads": [
        {"dp_rank": 0, "num_running_reqs": 4, "num_waiting_reqs": 1, "num_used_tokens": 99, "token_usage": 0.1},
        {"dp_rank": 1, "num_running_reqs": 2, "num_waiting_reqs": 0},
    ]})
    assert (load.running, load.waiting, load.total, load.ranks, load.source) == (6, 1, 7, 2, "sglang")
    assert load.in_flight is None and load.engine is None


def test_sglang_native_aggregate_is_preferred_when_present():
    load = parse_loads({
        "loads": [{"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 0, "num_total_reqs": 1}],
        "aggregate": {"total_running_reqs": 8, "total_waiting_reqs": 3, "total_reqs": 11, "avg_token_usage": 0.2},
    })
    assert (load.running, load.waiting, load.total) == (8, 3, 11)


def test_sglang_legacy_get_load_list_num_reqs_counts_running_plus_waiting():
    load = parse_loads([
        {"dp_rank": 0, "num_reqs": 5, "num_waiting_reqs": 2, "num_tokens": 100, "ts_tic": 1.0},
        {"dp_rank": 1, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0, "ts_tic": 1.0},
    ])
    assert (load.running, load.waiting, load.total, load.ranks, load.source) == (3, 2, 5, 2, "sglang-legacy")


def test_idle_needs_total_and_in_flight_zero():
    base = {"loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}], "paused": True,
            "aggregate": {"total_running_reqs": 0, "total_waiting_reqs": 0, "total_reqs": 0},
            "weight_version": "v", "engine": "stub"}
    assert parse_loads({**base, "in_flight": 0}).idle
    assert not parse_loads({**base, "in_flight": 1}).idle


@pytest.mark.parametrize("data, says", [
    ({"server_load": 3}, "HTTP requests"),
    ({"status": "ok"}, "no 'loads'"),
    ("text", "expected a JSON object"),
    ([{"dp_rank": 0}], "no request counts"),
    ([{"num_reqs": -1}], "non-negative"),
    ({"loads": [{"num_running_reqs": "3"}]}, "non-negative number"),
    ({"loads": [], "in_flight": 0, "paused": False, "weight_version": "v", "engine": "stub"}, "not the contract's loads .*aggregate"),
])
def test_anything_else_is_a_clear_error(data, says):
    with pytest.raises(LoadParseError, match=says):
        parse_loads(data)


def test_vllm_prometheus_gauges_are_summed_over_label_sets():
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 2.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 4.0\n'
        'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9.0\n'
    )
    load = parse_vllm_metrics(text)
    assert (load.running, load.waiting, load.total, load.source) == (5, 4, 9, "vllm-metrics")
    with pytest.raises(LoadParseError, match="no vllm:num_requests"):
        parse_vllm_metrics("# nothing here\n")
