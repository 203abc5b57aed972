"""The weight-version labels the SGLang plugin counts before 0.5.19 (engine_plugins.engines.sglang.version_labels):
the spans are SGLang 0.5.19's (``utils/weight_versions.py``) for the same changes."""

from __future__ import annotations

import pytest

from engine_plugins.engines.sglang.version_labels import VersionLabels, compute_spans, final_outputs


@pytest.mark.parametrize("events, current, n, spans", [
    ([], "v0", 0, [("v0", 0, 0)]),  # a request aborted before its first token: one empty span
    ([], "v0", 7, [("v0", 0, 7)]),
    ([("v0", 3)], "v1", 7, [("v0", 0, 3), ("v1", 3, 7)]),
    ([("v0", 3), ("v1", 3)], "v2", 7, [("v0", 0, 3), ("v2", 3, 7)]),  # two changes between two outputs
    ([("v0", 3), ("v1", 5)], "v0", 7, [("v0", 0, 3), ("v1", 3, 5), ("v0", 5, 7)]),  # back to an old version
    ([("v0", 9)], "v1", 7, [("v0", 0, 7)]),  # cut to the tokens kept
])
def test_spans_are_sglangs_for_the_same_changes(events, current, n, spans):
    assert compute_spans(events, current, n) == [{"version": v, "start": s, "end": e} for v, s, e in spans]


def test_a_final_output_gets_the_spans_of_the_changes_its_request_saw_and_the_rest_is_forgotten():
    labels = VersionLabels()
    labels.changing("v0", "v1", {"a": 4, "b": 0, "c": 2})
    labels.changing("v1", "v1", {"a": 6})  # a bump to the version in force changes nothing
    labels.finished("a", "v1")
    labels.changing("v1", "v2", {"c": 5})  # a's last output is in: not a's tokens
    meta = {"id": "a", "finish_reason": {"type": "length"}, "completion_tokens": 9, "weight_version": "v2"}
    labels.label(meta, "v2")
    assert meta["weight_versions"] == [{"version": "v0", "start": 0, "end": 4}, {"version": "v1", "start": 4, "end": 9}]
    assert meta["weight_version"] == "v1"
    labels.forget(["b", "c"])
    assert labels.pending() == 0


def test_outputs_that_are_labelled_already_or_not_final_are_left_alone():
    labels = VersionLabels()
    own = {"id": "a", "finish_reason": {"type": "stop"}, "completion_tokens": 1, "weight_versions": [], "weight_version": "x"}
    labels.label(own, "v0")
    assert own["weight_versions"] == [] and own["weight_version"] == "x"
    running = {"meta_info": {"id": "a", "finish_reason": None}}
    done = {"meta_info": {"id": "b", "finish_reason": {"type": "stop"}}}
    assert final_outputs(running) == [] and final_outputs([running, done]) == [done["meta_info"]]


def test_a_request_forgotten_before_its_state_goes_keeps_nothing_after():
    # A caller that went before the last output: the tracker forgets the request, and SGLang
    # drops its state a moment later.
    labels = VersionLabels()
    labels.forget("gone", held=lambda rid: True)
    labels.changing("v0", "v1", {"gone": 3})
    labels.finished("gone", "v1")
    assert labels.pending() == 0
