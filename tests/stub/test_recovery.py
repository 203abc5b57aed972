"""tests/recovery.py on a real stub server: a server a failed test left paused with requests in
flight is made idle and resumed; one that does not answer is reported, for a restart."""

from __future__ import annotations

import signal
import threading

import httpx

from recovery import make_usable
from targets import stub_server


def test_a_server_left_paused_with_a_request_in_flight_is_resumed_and_idle(tmp_path):
    with stub_server(tmp_path, "--step-s", "0.01") as target:
        headers = {"Authorization": f"Bearer {target.api_key}"}
        with httpx.Client(base_url=target.url, headers=headers, timeout=60) as http:
            body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": target.long_tokens, "ignore_eos": True}}
            answers = []
            left = threading.Thread(target=lambda: answers.append(http.post("/partial_generate", json=body).json()))
            left.start()
            while http.get("/v1/loads").json()["in_flight"] < 1:
                pass
            assert http.post("/pause", json={"mode": "keep"}).json()["is_paused"] is True
            assert make_usable(target) is None
            left.join(30)
            loads = http.get("/v1/loads").json()
    assert loads["in_flight"] == 0 and loads["paused"] is False
    assert answers and answers[0]["cancelled"] is True


def test_a_server_that_does_not_answer_is_reported(tmp_path):
    with stub_server(tmp_path) as target:
        target.signal(signal.SIGSTOP)
        try:
            why = make_usable(target, answer_s=1.0)
        finally:
            target.signal(signal.SIGCONT)
    assert why is not None and "did not answer" in why
